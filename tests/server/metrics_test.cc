// /metrics end to end: the real kilnd serving the example model. Counts must move by exactly
// the calls made, and a live scrape must pass `promtool check metrics` (Debian's
// `prometheus` package; skipped when promtool is not installed).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "kiln/v1/inference.grpc.pb.h"
#include "kiln/v1/model.grpc.pb.h"
#include "server/serving/tensor_codec.h"
#include "tests/server/free_port.h"
#include "tests/server/kilnd_process.h"

namespace kiln::server {
namespace {
namespace fs = std::filesystem;

// kilnd on free ports with a copy of the example model; SIGTERM on destruction.
class MetricsServer : public ::testing::Test {
 protected:
  void SetUp() override {
    const fs::path src = fs::path(std::getenv("KILN_SOURCE_DIR")) / "config/models/example";
    fs::create_directories(dir_ / "models");
    fs::copy(src, dir_ / "models" / "example", fs::copy_options::recursive);
    const Ports ports = StartOnFreePorts(kilnd_, [&](const Ports& p) {
      std::ofstream(dir_ / "server.yaml")
          << "server: {grpc_address: '127.0.0.1:" << p.grpc
          << "', http_address: '127.0.0.1:" << p.http << "'}\nmodel_repository: '"
          << (dir_ / "models").string() << "'\nlog: {level: warn}\n";
      return (dir_ / "server.yaml").string();
    });
    grpc_port_ = ports.grpc;
    http_port_ = ports.http;
    http_ = std::make_unique<httplib::Client>("127.0.0.1", http_port_);
    // /readyz turns 200 once the example is READY (it is the only model).
    for (int i = 0; i < 1200; ++i) {
      auto r = http_->Get("/readyz");
      if (r && r->status == 200 && Value(Scrape(), "kiln_models{state=\"READY\"}") == 1) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    stub_ = v1::InferenceService::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", grpc_port_), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    kilnd_.Stop();
    fs::remove_all(dir_);
  }

  std::string Scrape() {
    auto r = http_->Get("/metrics");
    if (!r || r->status != 200) return "";
    EXPECT_EQ(r->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
    return r->body;
  }
  // `name{a="x",b="y"}` as its name and its sorted label pairs: the exposition format leaves
  // the order of labels to the writer.
  static std::pair<std::string, std::vector<std::string>> Parse(const std::string& series) {
    const size_t brace = series.find('{');
    std::pair<std::string, std::vector<std::string>> out{series.substr(0, brace), {}};
    if (brace == std::string::npos) return out;
    std::string labels = series.substr(brace + 1, series.rfind('}') - brace - 1);
    for (size_t start = 0; start < labels.size();) {
      size_t end = labels.find("\",", start);  // values here hold no '",'
      end = end == std::string::npos ? labels.size() : end + 1;
      out.second.push_back(labels.substr(start, end - start));
      start = end + 1;
    }
    std::sort(out.second.begin(), out.second.end());
    return out;
  }
  // The value of the sample `series` (name and labels, in any order); 0 when absent.
  static double Value(const std::string& text, const std::string& series) {
    const auto want = Parse(series);
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      const size_t space = line.rfind(' ');
      if (space == std::string::npos || Parse(line.substr(0, space)) != want) continue;
      return std::stod(line.substr(space + 1));
    }
    return 0;
  }

  grpc::Status Predict(const std::string& model, int64_t rows) {
    v1::PredictRequest req;
    req.set_model(model);
    EncodeTensor(Tensor(DType::kFloat32, {rows, 8}), false, &(*req.mutable_inputs())["x"]);
    v1::PredictResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return stub_->Predict(&ctx, req, &resp);
  }
  grpc::Status BatchPredict(int samples) {
    v1::BatchPredictRequest req;
    req.set_model("example");
    for (int i = 0; i < samples; ++i) {
      EncodeTensor(Tensor(DType::kFloat32, {1, 8}), false,
                   &(*req.add_samples()->mutable_inputs())["x"]);
    }
    v1::BatchPredictResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return stub_->BatchPredict(&ctx, req, &resp);
  }

  fs::path dir_ = fs::path(::testing::TempDir()) / absl::StrCat("kilnd_metrics_", getpid());
  int grpc_port_ = 0, http_port_ = 0;
  KilndProcess kilnd_;
  std::unique_ptr<httplib::Client> http_;
  std::unique_ptr<v1::InferenceService::Stub> stub_;
};

TEST_F(MetricsServer, CountsMoveByExactlyTheCallsMade) {
  const std::string before = Scrape();
  ASSERT_FALSE(before.empty());
  EXPECT_EQ(Value(before, "kiln_models{state=\"READY\"}"), 1) << before;
  EXPECT_EQ(Value(before, "kiln_differential_checks_total{model=\"example\",outcome=\"pass\"}") +
                Value(before,
                      "kiln_differential_checks_total{model=\"example\","
                      "outcome=\"pass_after_bisect\"}"),
            1);
  EXPECT_EQ(Value(before, "kiln_compile_duration_seconds_count{model=\"example\"}"), 1);
  EXPECT_GT(Value(before, "kiln_engine_arena_bytes{model=\"example\",device=\"cpu\",batch=\"8\"}"),
            0)
      << before;
  EXPECT_GT(Value(before, "kiln_process_resident_memory_bytes"), 1 << 20);
  // The example's weights stay charged to the budget while it is loaded.
  EXPECT_GT(Value(before, "kiln_memory_budget_used_bytes"), 0);
  EXPECT_GT(Value(before, "kiln_memory_budget_bytes"), Value(before, "kiln_memory_budget_used_bytes"));

  constexpr int kPredicts = 5, kSamples = 3;
  for (int i = 0; i < kPredicts; ++i) ASSERT_TRUE(Predict("example", 2).ok());
  ASSERT_TRUE(BatchPredict(kSamples).ok());
  EXPECT_EQ(Predict("no_such_model", 1).error_code(), grpc::StatusCode::NOT_FOUND);
  const std::string after = Scrape();

  auto delta = [&](const std::string& series) {
    return Value(after, series) - Value(before, series);
  };
  EXPECT_EQ(delta("kiln_requests_total{model=\"example\",method=\"Predict\",code=\"OK\"}"),
            kPredicts);
  EXPECT_EQ(delta("kiln_requests_total{model=\"example\",method=\"BatchPredict\",code=\"OK\"}"), 1);
  // Unknown names share one series with an empty model label.
  EXPECT_EQ(delta("kiln_requests_total{model=\"\",method=\"Predict\",code=\"NOT_FOUND\"}"), 1);
  EXPECT_EQ(delta("kiln_request_duration_seconds_count{model=\"example\",method=\"Predict\"}"),
            kPredicts);
  EXPECT_EQ(delta("kiln_request_duration_seconds_bucket{model=\"example\",method=\"Predict\","
                  "le=\"+Inf\"}"),
            kPredicts);
  EXPECT_GT(delta("kiln_request_duration_seconds_sum{model=\"example\",method=\"Predict\"}"), 0);
  // Every queued request (each Predict, each sample) waits in the queue once.
  EXPECT_EQ(delta("kiln_queue_duration_seconds_count{model=\"example\"}"), kPredicts + kSamples);
  EXPECT_EQ(delta("kiln_batch_size_sum{model=\"example\"}"), kPredicts * 2 + kSamples);
  EXPECT_GE(delta("kiln_compute_duration_seconds_count{model=\"example\",batch=\"2\"}"), 1);
  EXPECT_EQ(Value(after, "kiln_queue_depth{model=\"example\"}"), 0);
  // This scrape's own request is not an inference RPC.
  EXPECT_EQ(Value(after, "kiln_inflight_requests"), 0);
}

TEST_F(MetricsServer, LiveScrapePassesPromtool) {
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "promtool not installed (Debian package `prometheus`)";
  }
  ASSERT_TRUE(Predict("example", 1).ok());
  const fs::path file = dir_ / "scrape.txt";
  std::ofstream(file) << Scrape();
  const std::string cmd = "promtool check metrics < " + file.string() + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof buf, p)) out += buf;
  const int status = pclose(p);
  EXPECT_EQ(status, 0) << out;
  EXPECT_EQ(out, "") << "promtool lint findings:\n" << out;
}

}  // namespace
}  // namespace kiln::server

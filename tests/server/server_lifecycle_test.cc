// The real kilnd under lifecycle changes: Unload waits for in-flight requests, 50 load/unload
// cycles under load leak no memory, a broken pass is found by the warm-up check and the engine
// cache keeps the repair over a restart, SIGTERM lets in-flight requests finish.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <random>
#include <thread>

#include "base/file.h"
#include "compiler/onnx/exporter.h"
#include "compiler/onnx/importer.h"
#include "ir/builder.h"
#include "kiln/v1/inference.grpc.pb.h"
#include "kiln/v1/model.grpc.pb.h"
#include "ops/interpreter.h"
#include "server/serving/tensor_codec.h"
#include "tests/server/free_port.h"
#include "tests/server/integration_kilnd.h"
#include "tests/server/kilnd_process.h"

namespace kiln::server {
namespace {
namespace fs = std::filesystem;

using namespace it;  // NOLINT: the helpers shared with the other half

// The server these tests change, started before the first (the integration tests' first
// test starts theirs).
class StartKilnd : public ::testing::Environment {
 public:
  void SetUp() override { Kilnd::Get().Start(); }
};
[[maybe_unused]] const ::testing::Environment* const kStartKilnd =
    ::testing::AddGlobalTestEnvironment(new StartKilnd);

// Starts `n` one-row Predicts on `model` on their own threads (each with its own channel,
// so a later stop of the shared one cannot cancel them).
std::vector<std::future<grpc::Status>> PredictInBackground(const std::string& model, int n) {
  std::vector<std::future<grpc::Status>> calls;
  const std::string target = absl::StrCat("127.0.0.1:", Kilnd::Get().grpc_port_);
  for (int i = 0; i < n; ++i) {
    calls.push_back(std::async(std::launch::async, [=] {
      auto stub = v1::InferenceService::NewStub(
          grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
      const Tensor x = RandomInput(1, 500 + i);
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
      v1::PredictResponse out;
      grpc::Status s = stub->Predict(&ctx, ExampleRequest(x, model), &out);
      if (s.ok() && out.outputs().count("logits")) {
        const float want = Expected(x).at("logits").data<float>()[0];
        Tensor got = *DecodeTensor(out.outputs().at("logits"), "logits");
        if (std::abs(got.data<float>()[0] - want) > 1e-3f) {
          return grpc::Status(grpc::StatusCode::DATA_LOSS, "wrong answer");
        }
      }
      return s;
    }));
  }
  return calls;
}

grpc::Status Unload(const std::string& name, bool delete_files) {
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", std::string("Bearer ") + kToken);
  v1::UnloadModelRequest req;
  req.set_name(name);
  req.set_delete_from_repository(delete_files);
  v1::UnloadModelResponse resp;
  return Kilnd::Get().models_->UnloadModel(&ctx, req, &resp);
}

TEST(Kilnd, UnloadWaitsForInFlightRequests) {
  Kilnd::Get().WaitForModel("slow");
  auto calls = PredictInBackground("slow", 3);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // queued, waiting for company
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(Unload("slow", false).ok());
  // The requests were queued 100 ms before the unload and wait 300 ms for company: Unload
  // returns only after their batch ran and the version was freed.
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(150));
  for (auto& c : calls) {
    grpc::Status s = c.get();
    EXPECT_TRUE(s.ok()) << s.error_message();
  }
  v1::PredictResponse out;
  EXPECT_EQ(Predict(ExampleRequest(RandomInput(1, 3), "slow"), &out).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

int64_t VmRssKiB(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  }
  return -1;
}

grpc::Status UploadExample(const std::string& name) {
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", std::string("Bearer ") + kToken);
  v1::LoadModelResponse resp;
  auto writer = Kilnd::Get().models_->LoadModel(&ctx, &resp);
  v1::LoadModelChunk chunk;
  chunk.set_name(name);
  chunk.set_version(1);
  chunk.set_data(ReadFile(ExampleOnnx()));
  writer->Write(chunk);
  writer->WritesDone();
  return writer->Finish();
}

TEST(Kilnd, LoadUnloadCyclesUnderLoadLeakNoMemory) {
  std::atomic<bool> stop{false};
  std::atomic<int> served{0}, failed{0};
  std::thread load([&] {
    while (!stop) {
      v1::PredictResponse out;
      (Predict(ExampleRequest(RandomInput(2, 11)), &out).ok() ? served : failed)++;
    }
  });
  auto cycle = [](int i) {
    ASSERT_TRUE(UploadExample("cycled").ok()) << "cycle " << i;
    v1::PredictResponse out;
    ASSERT_TRUE(Predict(ExampleRequest(RandomInput(1, i), "cycled"), &out).ok());
    ASSERT_TRUE(Unload("cycled", true).ok()) << "cycle " << i;
  };
  for (int i = 0; i < 5; ++i) cycle(i);  // allocator pools and caches reach their size
  const int64_t before = VmRssKiB(Kilnd::Get().process_.pid());
  for (int i = 0; i < 50; ++i) cycle(i);
  const int64_t after = VmRssKiB(Kilnd::Get().process_.pid());
  stop = true;
  load.join();
  std::printf("VmRSS over 50 load/unload cycles: %lld -> %lld KiB; %d predicts served\n",
              static_cast<long long>(before), static_cast<long long>(after), served.load());
  EXPECT_EQ(failed, 0);
  EXPECT_LT(after - before, 8 * 1024) << "more than 8 MiB growth over 50 cycles";
}

// Restarts with a deliberately broken pass registered (--enable-test-faults) and the engine
// cache on disk: the warm-up check must catch the broken engine, bisect to the pass, disable
// it and serve correct answers; a second restart must come back the same from the cache.
TEST(Kilnd, WarmupRepairsABrokenPassAndTheCacheKeepsTheRepair) {
  Kilnd::Get().extra_args_ = {"--enable-test-faults", "--engine-cache-dir",
                              (Kilnd::Get().dir_ / "cache").string()};
  for (int start = 0; start < 2; ++start) {
    EXPECT_EQ(Kilnd::Get().Stop(), 0);
    Kilnd::Get().Start();
    grpc::ClientContext ctx;
    v1::GetModelRequest get;
    get.set_name("example");
    v1::ModelInfo info;
    ASSERT_TRUE(Kilnd::Get().models_->GetModel(&ctx, get, &info).ok());
    EXPECT_EQ(info.state(), v1::MODEL_STATE_READY) << "start " << start;
    ASSERT_EQ(info.check().disabled_passes_size(), 1) << "start " << start;
    EXPECT_EQ(info.check().disabled_passes(0), "test_perturb_constant");
    const Tensor x = RandomInput(3, 41 + start);
    v1::PredictResponse out;
    ASSERT_TRUE(Predict(ExampleRequest(x), &out).ok());
    ExpectNear(out.outputs().at("logits"), Expected(x).at("logits"));
  }
  EXPECT_FALSE(fs::is_empty(Kilnd::Get().dir_ / "cache"));
}

TEST(Kilnd, SigtermLetsInFlightRequestsFinish) {
  Kilnd::Get().WaitForModel("slow");
  auto calls = PredictInBackground("slow", 3);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // queued for 300 ms
  Kilnd::Get().infer_.reset();
  Kilnd::Get().models_.reset();
  Kilnd::Get().channel_.reset();
  EXPECT_EQ(Kilnd::Get().Stop(), 0);
  for (auto& c : calls) {
    grpc::Status s = c.get();
    EXPECT_TRUE(s.ok()) << s.error_message();
  }
}

}  // namespace
}  // namespace kiln::server

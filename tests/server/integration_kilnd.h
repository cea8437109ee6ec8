// Shared by the kilnd integration tests (server_integration_test.cc, server_lifecycle_test.cc):
// one kilnd process per test binary on free ports, with the example model, a FAILED one and a
// slow one in its repository, its clients, and the example's reference answers.
#pragma once

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
#include "tests/server/kilnd_process.h"

namespace kiln::server::it {

namespace fs = std::filesystem;

// The file's bytes, empty when it cannot be read (the assertions on them then fail).
inline std::string ReadFile(const fs::path& p) { return ReadWholeFile(p.string()).value_or(""); }

inline constexpr char kToken[] = "s3cret";

// The server process and its clients.
class Kilnd {
 public:
  static Kilnd& Get() {
    static Kilnd k;
    return k;
  }
  void Start() {
    const Ports ports = StartOnFreePorts(
        process_,
        [&](const Ports& p) {
          std::ofstream(dir_ / "server.yaml")
              << "server: {grpc_address: '127.0.0.1:" << p.grpc
              << "', http_address: '127.0.0.1:" << p.http << "', auth_token: '" << kToken
              << "', max_model_bytes: 100000}\n"
              << "model_repository: '" << (dir_ / "models").string() << "'\nlog: {level: warn}\n";
          return (dir_ / "server.yaml").string();
        },
        extra_args_);
    grpc_port_ = ports.grpc;
    http_port_ = ports.http;
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", grpc_port_),
                                   grpc::InsecureChannelCredentials());
    infer_ = v1::InferenceService::NewStub(channel_);
    models_ = v1::ModelService::NewStub(channel_);
    WaitForModel("example");
  }
  // SIGTERM, and the exit status (0 when it drained and stopped cleanly).
  int Stop() { return process_.Stop(); }
  void WaitForModel(const std::string& name) {
    for (int i = 0; i < 600; ++i) {
      grpc::ClientContext ctx;
      v1::GetModelRequest req;
      req.set_name(name);
      v1::ModelInfo info;
      if (models_->GetModel(&ctx, req, &info).ok() && info.state() != v1::MODEL_STATE_LOADING)
        return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    FAIL() << "kilnd never loaded " << name;
  }
  ~Kilnd() {
    process_.Stop();
    fs::remove_all(dir_);
  }

  fs::path dir_ = fs::path(::testing::TempDir()) / absl::StrCat("kilnd_it_", getpid());
  int grpc_port_ = 0, http_port_ = 0;
  KilndProcess process_;
  std::vector<std::string> extra_args_;  // after --config on the next Start
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::InferenceService::Stub> infer_;
  std::unique_ptr<v1::ModelService::Stub> models_;

 private:
  Kilnd() {
    const fs::path src = fs::path(std::getenv("KILN_SOURCE_DIR")) / "config" / "models" / "example";
    fs::create_directories(dir_ / "models");
    fs::copy(src, dir_ / "models" / "example", fs::copy_options::recursive);
    // A model whose config is wrong: FAILED from the start, so /readyz says 503 and why.
    fs::create_directories(dir_ / "models" / "broken" / "1");
    fs::copy(src / "1", dir_ / "models" / "broken" / "1", fs::copy_options::recursive);
    std::ofstream(dir_ / "models" / "broken" / "config.yaml") << "device: tpu\n";
    // The example again, holding a lone request 300 ms for company: requests stay in flight
    // long enough to unload the model or stop the server under them.
    fs::create_directories(dir_ / "models" / "slow");
    fs::copy(src / "1", dir_ / "models" / "slow" / "1", fs::copy_options::recursive);
    std::ofstream(dir_ / "models" / "slow" / "config.yaml") << "max_queue_delay_us: 300000\n";
  }
};

inline fs::path ExampleOnnx() {
  return fs::path(std::getenv("KILN_SOURCE_DIR")) / "config/models/example/1/model.onnx";
}

inline Tensor RandomInput(int64_t rows, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-2, 2);
  Tensor t(DType::kFloat32, {rows, 8});
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = dist(rng);
  return t;
}

// The reference interpreter's answer on the raw example graph.
inline ref::TensorMap Expected(const Tensor& x) {
  static std::unique_ptr<Graph> graph = *onnx_io::ImportModelFile(ExampleOnnx().string());
  return *ref::Run(*graph, {{"x", x}});
}

inline void ExpectNear(const v1::Tensor& got, const Tensor& want) {
  auto t = DecodeTensor(got, "output");
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->shape(), want.shape());
  for (int64_t i = 0; i < want.numel(); ++i) {
    EXPECT_NEAR(t->GetDouble(i), want.GetDouble(i), 1e-5) << "element " << i;
  }
}

inline grpc::Status Predict(const v1::PredictRequest& req, v1::PredictResponse* resp,
                            std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  return Kilnd::Get().infer_->Predict(&ctx, req, resp);
}

inline v1::PredictRequest ExampleRequest(const Tensor& x, const std::string& model = "example") {
  v1::PredictRequest req;
  req.set_model(model);
  EncodeTensor(x, false, &(*req.mutable_inputs())["x"]);
  return req;
}

}  // namespace kiln::server::it

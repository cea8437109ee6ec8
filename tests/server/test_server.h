// A kilnd under test with its own repository, ports and clients, plus the models the
// hardening tests upload. Used by the upload, chaos, shutdown and probe tests (the original
// integration test keeps its own shared server).
#pragma once

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/file.h"
#include "compiler/onnx/exporter.h"
#include "ir/builder.h"
#include "kiln/v1/inference.grpc.pb.h"
#include "kiln/v1/model.grpc.pb.h"
#include "server/serving/tensor_codec.h"
#include "tests/server/free_port.h"
#include "tests/server/kilnd_process.h"

namespace kiln::server::testing {
namespace fs = std::filesystem;

inline std::string ReadFile(const fs::path& p) { return ReadWholeFile(p.string()).value_or(""); }

inline fs::path SourceDir() { return fs::path(std::getenv("KILN_SOURCE_DIR")); }
inline std::string ExampleOnnx() {
  return ReadFile(SourceDir() / "config/models/example/1/model.onnx");
}

// x[batch, n] -> MatMul(w) -> Relu -> y, w seeded: distinct bytes per seed, n*n*4 bytes of
// weights (n = 1024 makes a 4 MB model).
inline std::string MlpOnnx(int64_t n, uint32_t seed) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {Dim::Symbol("batch"), Dim(n)});
  Tensor w(DType::kFloat32, {n, n});
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-0.05f, 0.05f);
  for (int64_t i = 0; i < w.numel(); ++i) w.mutable_data<float>()[i] = dist(rng);
  b.Output(b.Op("Relu", {b.Op("MatMul", {x, b.Constant("w", std::move(w))})}));
  auto proto = onnx_io::ExportModel(*b.Build());
  return proto.ok() ? proto->SerializeAsString() : std::string();
}

// x[batch, c, hw, hw] -> (Conv 3x3 pad 1 -> Relu) x layers: slow to check on the reference
// interpreter (c*c*9*hw*hw multiply-adds per layer and row), so a test can stop kilnd while
// it loads.
inline std::string ConvChainOnnx(int layers, int64_t c, int64_t hw) {
  GraphBuilder b;
  Value* v = b.Input("x", DType::kFloat32, {Dim::Symbol("batch"), Dim(c), Dim(hw), Dim(hw)});
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-0.05f, 0.05f);
  for (int l = 0; l < layers; ++l) {
    Tensor w(DType::kFloat32, {c, c, 3, 3});
    for (int64_t i = 0; i < w.numel(); ++i) w.mutable_data<float>()[i] = dist(rng);
    v = b.Op("Relu", {b.Op("Conv", {v, b.Constant(absl::StrCat("w", l), std::move(w))},
                           {{"pads", Attribute::Ints({1, 1, 1, 1})}})});
  }
  b.Output(v);
  auto proto = onnx_io::ExportModel(*b.Build());
  return proto.ok() ? proto->SerializeAsString() : std::string();
}

// Imports, but cannot be built: dim 0 of `x` ('sequence') is symbolic while `y`'s is not, so
// the model is not batchable, and a non-batchable model's leading dim gets no profile
// (server/model/dim_profiles.h) and no input_shapes sizes it.
inline std::string UnbuildableOnnx() {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {Dim::Symbol("sequence"), Dim(2)});
  Value* y = b.Input("y", DType::kFloat32, {Dim(1), Dim(2)});
  b.Output(b.Op("Add", {x, y}));
  auto proto = onnx_io::ExportModel(*b.Build());
  return proto.ok() ? proto->SerializeAsString() : std::string();
}

struct UploadSpec {
  UploadSpec(std::string n, std::string b, int64_t v = 0, std::string yaml = "")
      : name(std::move(n)), bytes(std::move(b)), version(v), config_yaml(std::move(yaml)) {}
  std::string name;
  std::string bytes;
  int64_t version = 0;
  std::string config_yaml;
  size_t chunk = 64 << 10;
  std::chrono::milliseconds deadline{120000};  // the client's
};

class TestServer {
 public:
  explicit TestServer(const std::string& tag)
      : dir_(fs::path(::testing::TempDir()) / absl::StrCat("kiln_", tag, "_", getpid())) {
    fs::remove_all(dir_);
    fs::create_directories(repo());
  }
  ~TestServer() {
    process_.Stop();
    fs::remove_all(dir_);
  }

  fs::path dir() const { return dir_; }
  fs::path repo() const { return dir_ / "models"; }
  int http_port() const { return http_port_; }
  int grpc_port() const { return grpc_port_; }
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }
  pid_t pid() const { return process_.pid(); }
  KilndProcess& process() { return process_; }

  // Starts kilnd (on fresh ports: StartOnFreePorts); `server_yaml` adds keys to the `server:`
  // map, `root_yaml` top-level lines.
  void Start(const std::string& server_yaml = "", const std::string& root_yaml = "",
             const std::vector<std::string>& args = {}) {
    const Ports ports = StartOnFreePorts(process_, [&](const Ports& p) {
      std::ofstream(dir_ / "server.yaml")
          << "server: {grpc_address: '127.0.0.1:" << p.grpc
          << "', http_address: '127.0.0.1:" << p.http << "', drain_timeout_ms: 2000"
          << (server_yaml.empty() ? "" : ", ") << server_yaml << "}\n"
          << "model_repository: '" << repo().string() << "'\nlog: {level: warn}\n"
          // A test that gives its own model_defaults (`{}`: kilnd's) replaces these.
          << (root_yaml.find("model_defaults") == std::string::npos
                  ? "model_defaults: {max_batch_size: 2, device: reference}\n"
                  : "")
          << root_yaml;
      return (dir_ / "server.yaml").string();
    }, args);
    grpc_port_ = ports.grpc;
    http_port_ = ports.http;
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", grpc_port_),
                                   grpc::InsecureChannelCredentials());
    infer_ = v1::InferenceService::NewStub(channel_);
    models_ = v1::ModelService::NewStub(channel_);
  }
  int Stop() { return process_.Stop(); }
  void Kill() { process_.Kill(); }

  // A fresh channel per call where calls overlap (one channel would serialize nothing, but
  // a stream that the server cancels must not take other calls with it).
  std::unique_ptr<v1::InferenceService::Stub> NewInferenceStub() const {
    return v1::InferenceService::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", grpc_port_), grpc::InsecureChannelCredentials()));
  }
  std::unique_ptr<v1::ModelService::Stub> NewModelStub() const {
    return v1::ModelService::NewStub(grpc::CreateChannel(absl::StrCat("127.0.0.1:", grpc_port_),
                                                         grpc::InsecureChannelCredentials()));
  }

  grpc::Status Upload(const UploadSpec& u, v1::LoadModelResponse* resp = nullptr) const {
    v1::LoadModelResponse ignored;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + u.deadline);
    auto stub = NewModelStub();
    auto writer = stub->LoadModel(&ctx, resp ? resp : &ignored);
    for (size_t off = 0; off < u.bytes.size() || off == 0; off += u.chunk) {
      v1::LoadModelChunk chunk;
      if (off == 0) {
        chunk.set_name(u.name);
        chunk.set_version(u.version);
        chunk.set_config_yaml(u.config_yaml);
      }
      chunk.set_data(u.bytes.substr(off, u.chunk));
      if (!writer->Write(chunk) || u.bytes.empty()) break;
    }
    writer->WritesDone();
    return writer->Finish();
  }

  grpc::Status Predict(const v1::PredictRequest& req, v1::PredictResponse* out) const {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return infer_->Predict(&ctx, req, out);
  }

  // One one-row Predict: `features` floats as input `input` (the example's x: 8).
  grpc::Status Predict(const std::string& model, int64_t features, int64_t version = 0,
                       v1::PredictResponse* out = nullptr, const std::string& input = "x") const {
    v1::PredictRequest req;
    req.set_model(model);
    req.set_version(version);
    Tensor x(DType::kFloat32, {1, features});
    for (int64_t i = 0; i < features; ++i) x.mutable_data<float>()[i] = 0.01f * i;
    EncodeTensor(x, false, &(*req.mutable_inputs())[input]);
    v1::PredictResponse ignored;
    return Predict(req, out ? out : &ignored);
  }

  grpc::Status GetModel(const std::string& name, int64_t version = 0,
                        v1::ModelInfo* info = nullptr) const {
    v1::ModelInfo ignored;
    grpc::ClientContext ctx;
    v1::GetModelRequest req;
    req.set_name(name);
    req.set_version(version);
    return models_->GetModel(&ctx, req, info ? info : &ignored);
  }

  grpc::Status Unload(const std::string& name, int64_t version, bool delete_files) const {
    grpc::ClientContext ctx;
    v1::UnloadModelRequest req;
    req.set_name(name);
    req.set_version(version);
    req.set_delete_from_repository(delete_files);
    v1::UnloadModelResponse resp;
    return models_->UnloadModel(&ctx, req, &resp);
  }

  // The loaded versions of `name` (ListModels), ascending, with their states.
  std::map<int64_t, v1::ModelState> Versions(const std::string& name) const {
    grpc::ClientContext ctx;
    v1::ListModelsResponse list;
    std::map<int64_t, v1::ModelState> out;
    if (!models_->ListModels(&ctx, v1::ListModelsRequest(), &list).ok()) return out;
    for (const auto& m : list.models()) {
      if (m.name() == name) out[m.version()] = m.state();
    }
    return out;
  }

  // Waits until `name` is no longer LOADING (or `seconds` pass); its state.
  v1::ModelState WaitLoaded(const std::string& name, int seconds = 60) const {
    v1::ModelInfo info;
    for (int i = 0; i < seconds * 20; ++i) {
      if (GetModel(name, 0, &info).ok() && info.state() != v1::MODEL_STATE_LOADING) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return info.state();
  }

  // Waits (at most `seconds`) for /readyz to say 200: every model loaded and READY.
  bool WaitReady(int seconds = 60) const {
    for (int i = 0; i < seconds * 20; ++i) {
      if (Readyz() == 200) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  // GET /readyz's status code (0: no answer).
  int Readyz(std::string* body = nullptr) const {
    httplib::Client http("127.0.0.1", http_port_);
    http.set_read_timeout(5, 0);
    auto r = http.Get("/readyz");
    if (r && body) *body = r->body;
    return r ? r->status : 0;
  }

  // Files under the repository, relative, sorted ("m/1/model.onnx").
  std::vector<std::string> RepoFiles() const {
    std::vector<std::string> out;
    for (const auto& e : fs::recursive_directory_iterator(repo())) {
      if (e.is_regular_file()) out.push_back(fs::relative(e.path(), repo()).string());
    }
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  fs::path dir_;
  int grpc_port_ = 0, http_port_ = 0;
  KilndProcess process_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::InferenceService::Stub> infer_;
  std::unique_ptr<v1::ModelService::Stub> models_;
};

}  // namespace kiln::server::testing

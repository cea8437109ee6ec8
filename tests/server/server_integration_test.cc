// kilnd end to end: the real binary on free ports, real gRPC clients. The tests run in order
// in one process and share one server (restarted by the restart test).
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

using namespace it;  // NOLINT: the helpers shared with the other half

namespace fs = std::filesystem;

TEST(Kilnd, StartsAndReportsHealth) {
  Kilnd::Get().Start();
  httplib::Client http("127.0.0.1", Kilnd::Get().http_port_);
  auto healthz = http.Get("/healthz");
  ASSERT_TRUE(healthz);
  EXPECT_EQ(healthz->status, 200);
  auto readyz = http.Get("/readyz");
  ASSERT_TRUE(readyz);
  EXPECT_EQ(readyz->status, 503);
  EXPECT_NE(readyz->body.find("broken version 1: FAILED"), std::string::npos) << readyz->body;
  EXPECT_NE(readyz->body.find("tpu"), std::string::npos) << readyz->body;
  // The OpenMP re-exec keeps the process's name, so ps, top and pkill find kilnd.
  EXPECT_EQ(ReadFile(absl::StrCat("/proc/", Kilnd::Get().process_.pid(), "/comm")), "kilnd\n");
}

TEST(Kilnd, GrpcHealthPerModel) {
  // grpc.health.v1.Health/Check by hand: HealthCheckRequest{service=1}, response{status=1}.
  auto check = [](const std::string& service) {
    grpc::TemplatedGenericStub<grpc::ByteBuffer, grpc::ByteBuffer> stub(Kilnd::Get().channel_);
    std::string wire = std::string("\x0a", 1) + char(service.size()) + service;
    grpc::Slice slice(wire);
    grpc::ByteBuffer req(&slice, 1), resp;
    grpc::ClientContext ctx;
    std::promise<grpc::Status> done;
    stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &req, &resp,
                   [&](grpc::Status s) { done.set_value(s); });
    grpc::Status s = done.get_future().get();
    std::vector<grpc::Slice> slices;
    if (s.ok()) (void)resp.Dump(&slices);
    return s.ok() && !slices.empty() ? int(slices[0].begin()[1]) : -s.error_code();
  };
  EXPECT_EQ(check("example"), 1);  // SERVING
  EXPECT_EQ(check("broken"), 2);   // NOT_SERVING
}

TEST(Kilnd, GetModelDescribesTheExample) {
  grpc::ClientContext ctx;
  v1::GetModelRequest req;
  req.set_name("example");
  v1::ModelInfo info;
  ASSERT_TRUE(Kilnd::Get().models_->GetModel(&ctx, req, &info).ok());
  EXPECT_EQ(info.state(), v1::MODEL_STATE_READY);
  ASSERT_EQ(info.inputs_size(), 1);
  EXPECT_EQ(info.inputs(0).name(), "x");
  EXPECT_EQ(info.inputs(0).shape(0), -1);
  ASSERT_EQ(info.outputs_size(), 2);
  EXPECT_EQ(info.engines_size(), 4);  // buckets 1, 2, 4, 8
  EXPECT_TRUE(info.check().ran());
  EXPECT_TRUE(info.check().ok());
  EXPECT_NE(info.compile_report_json().find("ops_before"), std::string::npos);
}

TEST(Kilnd, PredictMatchesTheReference) {
  const Tensor x = RandomInput(3, 7);
  v1::PredictResponse resp;
  grpc::Status s = Predict(ExampleRequest(x), &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.version(), 1);
  const ref::TensorMap want = Expected(x);
  ExpectNear(resp.outputs().at("logits"), want.at("logits"));
  ExpectNear(resp.outputs().at("probs"), want.at("probs"));
}

TEST(Kilnd, TypedOutputsAndFilter) {
  v1::PredictRequest req = ExampleRequest(RandomInput(1, 3));
  req.add_output_filter("probs");
  req.set_typed_outputs(true);
  v1::PredictResponse resp;
  ASSERT_TRUE(Predict(req, &resp).ok());
  ASSERT_EQ(resp.outputs_size(), 1);
  EXPECT_EQ(resp.outputs().at("probs").float_data_size(), 4);
}

TEST(Kilnd, BatchPredictKeepsOrder) {
  v1::BatchPredictRequest req;
  req.set_model("example");
  std::vector<Tensor> xs;
  for (uint32_t i = 0; i < 5; ++i) {
    xs.push_back(RandomInput(1 + i % 2, 100 + i));
    EncodeTensor(xs.back(), false, &(*req.add_samples()->mutable_inputs())["x"]);
  }
  grpc::ClientContext ctx;
  v1::BatchPredictResponse resp;
  ASSERT_TRUE(Kilnd::Get().infer_->BatchPredict(&ctx, req, &resp).ok());
  ASSERT_EQ(resp.results_size(), 5);
  for (int i = 0; i < 5; ++i) ExpectNear(resp.results(i).outputs().at("probs"), Expected(xs[i]).at("probs"));
}

TEST(Kilnd, ConcurrentClientsGetTheirOwnAnswers) {
  std::vector<std::thread> clients;
  std::atomic<int> wrong{0}, failed{0};
  for (int c = 0; c < 8; ++c) {
    clients.emplace_back([c, &wrong, &failed] {
      for (int i = 0; i < 25; ++i) {
        const Tensor x = RandomInput(1 + (c + i) % 3, 1000 * c + i);
        v1::PredictResponse resp;
        if (!Predict(ExampleRequest(x), &resp).ok()) {
          ++failed;
          continue;
        }
        auto got = DecodeTensor(resp.outputs().at("logits"), "logits");
        const Tensor want = Expected(x).at("logits");
        for (int64_t k = 0; k < want.numel(); ++k) {
          if (std::abs(got->GetDouble(k) - want.GetDouble(k)) > 1e-5) {
            ++wrong;
            break;
          }
        }
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
}

TEST(Kilnd, BadRequestsGetPreciseStatuses) {
  v1::PredictResponse resp;
  auto code = [&](const v1::PredictRequest& r) { return Predict(r, &resp).error_code(); };
  const Tensor x = RandomInput(1, 1);
  EXPECT_EQ(code(ExampleRequest(x, "nope")), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(code(ExampleRequest(x, "broken")), grpc::StatusCode::UNAVAILABLE);
  v1::PredictRequest pinned = ExampleRequest(x);
  pinned.set_version(9);
  EXPECT_EQ(code(pinned), grpc::StatusCode::NOT_FOUND);
  v1::PredictRequest missing;
  missing.set_model("example");
  grpc::Status s = Predict(missing, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "missing input 'x' (FLOAT[batch,8])");
  EXPECT_EQ(code(ExampleRequest(RandomInput(9, 1))), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(code(ExampleRequest(Tensor(DType::kInt64, {1, 8}))), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(code(ExampleRequest(Tensor(DType::kFloat32, {1, 7}))), grpc::StatusCode::INVALID_ARGUMENT);
  v1::PredictRequest short_bytes = ExampleRequest(x);
  (*short_bytes.mutable_inputs())["x"].mutable_raw_data()->resize(5);
  s = Predict(short_bytes, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "input 'x': raw_data has 5 bytes, FLOAT[1,8] needs 32");
  v1::PredictRequest filter = ExampleRequest(x);
  filter.add_output_filter("nope");
  EXPECT_EQ(code(filter), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Predict(ExampleRequest(x), &resp, std::chrono::milliseconds(-1)).error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED);
}

grpc::Status Upload(const std::string& name, const std::string& bytes, const std::string& token,
                    const std::string& yaml, v1::LoadModelResponse* resp) {
  grpc::ClientContext ctx;
  if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
  auto writer = Kilnd::Get().models_->LoadModel(&ctx, resp);
  for (size_t off = 0; off < bytes.size() || off == 0; off += 256) {
    v1::LoadModelChunk chunk;
    if (off == 0) {
      chunk.set_name(name);
      chunk.set_config_yaml(yaml);
    }
    chunk.set_data(bytes.substr(off, 256));
    if (!writer->Write(chunk)) break;
    if (bytes.empty()) break;
  }
  writer->WritesDone();
  return writer->Finish();
}

TEST(Kilnd, LoadModelStreamsAuthenticatesAndServes) {
  const std::string onnx = ReadFile(ExampleOnnx());
  v1::LoadModelResponse resp;
  EXPECT_EQ(Upload("uploaded", onnx, "", "", &resp).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Upload("uploaded", onnx, "wrong", "", &resp).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Upload("uploaded", "garbage", kToken, "", &resp).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Upload("bad/name", onnx, kToken, "", &resp).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Upload("uploaded", onnx, kToken, "colour: red", &resp).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Upload("huge", std::string(200000, 'x'), kToken, "", &resp).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  grpc::Status s = Upload("uploaded", onnx, kToken, "max_batch_size: 2\n", &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.model().state(), v1::MODEL_STATE_READY);
  EXPECT_EQ(resp.model().version(), 1);
  EXPECT_EQ(resp.model().max_batch_size(), 2);
  const Tensor x = RandomInput(2, 42);
  v1::PredictResponse out;
  ASSERT_TRUE(Predict(ExampleRequest(x, "uploaded"), &out).ok());
  ExpectNear(out.outputs().at("probs"), Expected(x).at("probs"));
  EXPECT_TRUE(fs::exists(Kilnd::Get().dir_ / "models/uploaded/1/model.onnx"));
}

TEST(Kilnd, CpuEngineServesTheExample) {
  // The oneDNN engine, checked on warm-up against the reference like every engine.
  v1::LoadModelResponse resp;
  grpc::Status s = Upload("example_cpu", ReadFile(ExampleOnnx()), kToken,
                          "device: cpu\nmax_batch_size: 4\n", &resp);
  if (s.error_code() == grpc::StatusCode::UNIMPLEMENTED) GTEST_SKIP() << s.error_message();
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.model().engines(0).device(), "cpu");
  // An MLP has no convolution: no layout to tune, oneDNN's own. Its team size was measured
  // (a small engine may run faster on one thread) and is reported.
  EXPECT_EQ(resp.model().engines(0).layout(), "primitive");
  EXPECT_GE(resp.model().engines(0).threads(), 1);
  EXPECT_TRUE(resp.model().check().ok());
  const Tensor x = RandomInput(3, 5);
  v1::PredictResponse out;
  ASSERT_TRUE(Predict(ExampleRequest(x, "example_cpu"), &out).ok());
  ExpectNear(out.outputs().at("probs"), Expected(x).at("probs"));
}

// Token ids and a mask, both [batch, sequence] with `sequence` symbolic, pooled by a masked
// mean over the sequence and projected: what a text model's export looks like at its inputs.
std::string SequenceModelOnnx() {
  GraphBuilder b;
  const Shape dyn = {Dim::Symbol("batch"), Dim::Symbol("sequence")};
  Value* ids = b.Input("ids", DType::kInt64, dyn);
  Value* mask = b.Input("mask", DType::kInt64, dyn);
  Tensor emb(DType::kFloat32, {12, 3});  // the warm-up draws ids from 0..10
  for (int64_t i = 0; i < emb.numel(); ++i) emb.mutable_data<float>()[i] = 0.1f * i - 1.f;
  Value* e = b.Op("Gather", {b.Constant("emb", emb), ids});
  Value* m = b.Op("Unsqueeze", {b.Op("Cast", {mask}, {{"to", Attribute::Int(1)}}),
                                b.Constant("ax", Tensor::FromInt64({2}, {1}))});
  Value* pooled = b.Op("ReduceMean", {b.Op("Mul", {e, m}), b.Constant("axes", Tensor::FromInt64({1}, {1}))},
                       {{"keepdims", Attribute::Int(0)}});
  b.Output(b.Op("MatMul", {pooled, b.Constant("w", Tensor::FromFloat({1, -1, 0.5f, 2, 0, 1}, {3, 2}))}));
  auto g = b.Build();
  auto proto = onnx_io::ExportModel(*g);
  return proto.ok() ? proto->SerializeAsString() : std::string();
}

TEST(Kilnd, InputShapesFixASymbolicSequenceDim) {
  const std::string onnx = SequenceModelOnnx();
  ASSERT_FALSE(onnx.empty());
  v1::LoadModelResponse resp;
  // Without a size for `sequence` the model loads with a profile of its own (no table
  // bounds the sequence: sizes 1..4096, checked at 128; server/model/dim_profiles.h).
  grpc::Status s = Upload("seq_unbound", onnx, kToken, "max_batch_size: 2\n", &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(resp.model().state(), v1::MODEL_STATE_READY) << resp.model().reason();
  EXPECT_EQ(resp.model().dynamic_dims().at("sequence"), 128);
  EXPECT_EQ(resp.model().dynamic_dim_ranges().at("sequence").max(), 4096);
  // An input the model does not have is refused, naming the inputs it does have.
  s = Upload("seq_typo", onnx, kToken, "input_shapes: {idz: [-1, 6]}\n", &resp);
  EXPECT_NE((s.error_message() + resp.model().reason()).find("inputs: ids, mask"),
            std::string::npos);
  // A rejected upload leaves nothing behind: no FAILED entry holding /readyz, no files.
  for (const char* name : {"seq_typo"}) {
    grpc::ClientContext ctx;
    v1::GetModelRequest get;
    get.set_name(name);
    v1::ModelInfo info;
    EXPECT_EQ(Kilnd::Get().models_->GetModel(&ctx, get, &info).error_code(),
              grpc::StatusCode::NOT_FOUND) << name;
    EXPECT_FALSE(fs::exists(Kilnd::Get().dir_ / "models" / name)) << name;
  }
  // A size on `ids` binds `sequence`, so `mask` (same symbol) follows.
  s = Upload("seq6", onnx, kToken, "max_batch_size: 2\ninput_shapes: {ids: [-1, 6]}\n", &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(resp.model().state(), v1::MODEL_STATE_READY) << resp.model().reason();
  ASSERT_EQ(resp.model().inputs_size(), 2);
  for (const auto& in : resp.model().inputs()) {
    EXPECT_EQ(std::vector<int64_t>(in.shape().begin(), in.shape().end()),
              (std::vector<int64_t>{-1, 6})) << in.name();
  }
  Tensor ids(DType::kInt64, {2, 6}), mask(DType::kInt64, {2, 6});
  for (int64_t i = 0; i < 12; ++i) {
    ids.mutable_data<int64_t>()[i] = (i * 7) % 10;
    mask.mutable_data<int64_t>()[i] = i % 6 < 4 ? 1 : 0;
  }
  v1::PredictRequest req;
  req.set_model("seq6");
  EncodeTensor(ids, false, &(*req.mutable_inputs())["ids"]);
  EncodeTensor(mask, false, &(*req.mutable_inputs())["mask"]);
  v1::PredictResponse out;
  s = Predict(req, &out);
  ASSERT_TRUE(s.ok()) << s.error_message();
  auto graph = onnx_io::ImportModelBytes(onnx);
  ASSERT_TRUE(graph.ok()) << graph.status();
  auto want = ref::Run(**graph, {{"ids", ids}, {"mask", mask}});
  ASSERT_TRUE(want.ok()) << want.status();
  ExpectNear(out.outputs().begin()->second, want->begin()->second);
  // Another sequence length is not what the engines were built for.
  Tensor short_ids(DType::kInt64, {2, 5});
  EncodeTensor(short_ids, false, &(*req.mutable_inputs())["ids"]);
  EXPECT_EQ(Predict(req, &out).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST(Kilnd, PredictLatency) {
  // Reported, not asserted: sequential one-row Predicts (each waits max_queue_delay_us for company).
  const v1::PredictRequest base = ExampleRequest(RandomInput(1, 9));
  for (const char* model : {"example", "example_cpu"}) {
    grpc::ClientContext ctx;
    v1::GetModelRequest get;
    get.set_name(model);
    v1::ModelInfo info;
    if (!Kilnd::Get().models_->GetModel(&ctx, get, &info).ok()) continue;  // no cpu device
    v1::PredictRequest req = base;
    req.set_model(model);
    std::vector<double> us;
    for (int i = 0; i < 500; ++i) {
      v1::PredictResponse out;
      const auto t0 = std::chrono::steady_clock::now();
      ASSERT_TRUE(Predict(req, &out).ok());
      us.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(us.begin(), us.end());
    std::printf("Predict latency (%s, batch 1, 500 sequential calls): p50 %.0f us, p99 %.0f us\n",
                model, us[us.size() / 2], us[us.size() * 99 / 100]);
  }
}

TEST(Kilnd, UnloadThenReadyAndList) {
  grpc::ClientContext ctx;
  v1::UnloadModelRequest req;
  req.set_name("broken");
  req.set_delete_from_repository(true);
  v1::UnloadModelResponse resp;
  EXPECT_EQ(Kilnd::Get().models_->UnloadModel(&ctx, req, &resp).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  grpc::ClientContext ctx2;
  ctx2.AddMetadata("authorization", std::string("Bearer ") + kToken);
  ASSERT_TRUE(Kilnd::Get().models_->UnloadModel(&ctx2, req, &resp).ok());
  httplib::Client http("127.0.0.1", Kilnd::Get().http_port_);
  auto readyz = http.Get("/readyz");
  ASSERT_TRUE(readyz);
  EXPECT_EQ(readyz->status, 200) << readyz->body;
  grpc::ClientContext ctx3;
  v1::ListModelsResponse list;
  ASSERT_TRUE(Kilnd::Get().models_->ListModels(&ctx3, v1::ListModelsRequest(), &list).ok());
  std::vector<std::string> names;
  for (const auto& m : list.models()) names.push_back(m.name());
  EXPECT_NE(std::find(names.begin(), names.end(), "example"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "uploaded"), names.end());
  EXPECT_EQ(std::find(names.begin(), names.end(), "broken"), names.end());
}

TEST(Kilnd, RestartServesTheSameModels) {
  EXPECT_EQ(Kilnd::Get().Stop(), 0);
  Kilnd::Get().Start();
  Kilnd::Get().WaitForModel("uploaded");
  const Tensor x = RandomInput(2, 77);
  for (const char* model : {"example", "uploaded"}) {
    v1::PredictResponse out;
    grpc::Status s = Predict(ExampleRequest(x, model), &out);
    ASSERT_TRUE(s.ok()) << model << ": " << s.error_message();
    ExpectNear(out.outputs().at("logits"), Expected(x).at("logits"));
  }
  v1::PredictResponse out;
  EXPECT_EQ(Predict(ExampleRequest(x, "broken"), &out).error_code(), grpc::StatusCode::NOT_FOUND);
  httplib::Client http("127.0.0.1", Kilnd::Get().http_port_);
  EXPECT_EQ(http.Get("/readyz")->status, 200);
}

}  // namespace
}  // namespace kiln::server

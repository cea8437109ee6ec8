// Limits a hostile client meets (issue: responses over 2 GB aborted kilnd, a 186-byte upload
// took 12 GB, deadlines stopped at the door, a cancelled upload still landed): a response
// past the message limit is refused (before it is computed where the shapes tell), the memory
// budget bounds what a build or a request allocates, a deadline stops the run it belongs to,
// and an upload whose client has gone is not committed. Each test starts its own kilnd.
#include <fstream>

#include "tests/server/test_server.h"

namespace kiln::server::testing {
namespace {

using grpc::StatusCode;

std::string Export(GraphBuilder& b) {
  auto proto = onnx_io::ExportModel(*b.Build());
  return proto.ok() ? proto->SerializeAsString() : std::string();
}

// x[batch, 8] -> Tile by [1, 65536] -> y[batch, 524288]: 2 MiB of output per 32-byte row.
std::string WideningOnnx() {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {Dim::Symbol("batch"), Dim(8)});
  b.Output(b.Op("Tile", {x, b.Constant("repeats", Tensor::FromInt64({1, 65536}, {2}))}));
  return Export(b);
}

// x[1] expanded to the shape the request sends (s: int64[2]): the output is as large as the
// client asks.
std::string ExpandByRequestOnnx() {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {Dim(1)});
  Value* s = b.Input("s", DType::kInt64, {Dim(2)});
  b.Output(b.Op("Expand", {x, s}));
  return Export(b);
}

// 186 bytes that ask for a [30000, 30000] float constant and sum it.
std::string HugeConstantOnnx() {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {Dim(1)});
  Value* big = b.Op("ConstantOfShape", {b.Constant("shape", Tensor::FromInt64({30000, 30000}, {2}))},
                    {{"value", Attribute::TensorValue(Tensor::FromFloat({1.0f}, {1}))}});
  Value* sum = b.Op("ReduceSum", {big}, {{"keepdims", Attribute::Int(0)}});
  b.Output(b.Op("Add", {x, sum}));
  return Export(b);
}

// y = x + n: a Loop of n[0] iterations adding 1 (n comes from the request).
std::string CountingLoopOnnx() {
  GraphBuilder body;
  body.Input("i", DType::kInt64, Shape{});
  Value* cond = body.Input("cond", DType::kBool, Shape{});
  Value* v = body.Input("v", DType::kFloat32, {Dim(1)});
  body.Output(body.Op("Identity", {cond}));
  body.Output(body.Op("Add", {v, body.Constant("one", Tensor::FromFloat({1.0f}, {1}))}));
  std::shared_ptr<const Graph> g(body.Build().release());

  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {Dim(1)});
  Value* n = b.Input("n", DType::kInt64, {Dim(1)});
  Value* trips = b.Op("Reshape", {n, b.Constant("scalar", Tensor::FromInt64({}, {0}))});
  Tensor yes(DType::kBool, {});
  yes.mutable_data<uint8_t>()[0] = 1;
  Value* go = b.Constant("go", std::move(yes));
  b.Output(b.Op("Loop", {trips, go, x}, {{"body", Attribute::GraphValue(g)}}));
  return Export(b);
}

v1::PredictRequest ExpandRequest(int64_t rows, int64_t cols) {
  v1::PredictRequest req;
  req.set_model("expand");
  EncodeTensor(Tensor::FromFloat({2.0f}, {1}), false, &(*req.mutable_inputs())["x"]);
  EncodeTensor(Tensor::FromInt64({rows, cols}, {2}), false, &(*req.mutable_inputs())["s"]);
  return req;
}

v1::PredictRequest LoopRequest(int64_t trips) {
  v1::PredictRequest req;
  req.set_model("loop");
  EncodeTensor(Tensor::FromFloat({0.0f}, {1}), false, &(*req.mutable_inputs())["x"]);
  EncodeTensor(Tensor::FromInt64({trips}, {1}), false, &(*req.mutable_inputs())["n"]);
  return req;
}

// VmHWM: the process's peak resident set, in bytes (0 when unreadable).
int64_t PeakRss(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return 0;
}

TEST(Limits, ABatchWhoseAnswerPassesTheMessageLimitIsRefusedBeforeItRuns) {
  TestServer s("limits_batch");
  s.Start();
  ASSERT_TRUE(s.Upload({"wide", WideningOnnx(), 1, "max_batch_size: 2\n"}).ok());
  // 1,100 one-row samples: a 50 KB request whose answer would be 2.3 GB.
  v1::BatchPredictRequest req;
  req.set_model("wide");
  for (int i = 0; i < 1100; ++i) {
    EncodeTensor(Tensor(DType::kFloat32, {1, 8}), false, &(*req.add_samples()->mutable_inputs())["x"]);
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::BatchPredictResponse resp;
  const auto t0 = std::chrono::steady_clock::now();
  grpc::Status st = s.NewInferenceStub()->BatchPredict(&ctx, req, &resp);
  EXPECT_EQ(st.error_code(), StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  EXPECT_NE(st.error_message().find("max_message_bytes"), std::string::npos) << st.error_message();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5)) << "it was computed";
  // Under the limit the same model answers, and the server is alive.
  v1::PredictResponse out;
  EXPECT_TRUE(s.Predict("wide", 8, 0, &out).ok());
  EXPECT_EQ(s.Readyz(), 200);
}

TEST(Limits, AnAnswerSizedByTheRequestMeetsTheMessageLimitAndTheBudget) {
  TestServer s("limits_expand");
  s.Start("memory_budget_bytes: 1073741824");
  // The CPU engine serves outputs sized at run time (its dynamic region).
  ASSERT_TRUE(s.Upload({"expand", ExpandByRequestOnnx(), 0, "device: cpu\n"}).ok());
  v1::PredictResponse out;
  // 2.1 GB: past the 1 GiB budget, refused while it is computed.
  grpc::Status st = s.Predict(ExpandRequest(32768, 16400), &out);
  EXPECT_EQ(st.error_code(), StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  EXPECT_NE(st.error_message().find("memory budget"), std::string::npos) << st.error_message();
  // 128 MiB: within the budget, past the 64 MiB message limit: refused before it is encoded.
  st = s.Predict(ExpandRequest(4096, 8192), &out);
  EXPECT_EQ(st.error_code(), StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  EXPECT_NE(st.error_message().find("max_message_bytes"), std::string::npos) << st.error_message();
  // A small one is answered.
  st = s.Predict(ExpandRequest(3, 4), &out);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(out.outputs().begin()->second.shape_size(), 2);
  EXPECT_LT(PeakRss(s.pid()), int64_t{1536} << 20);
}

TEST(Limits, ATinyUploadAskingForAHugeConstantIsRefusedWithinTheBudget) {
  TestServer s("limits_const");
  s.Start("memory_budget_bytes: 1073741824");
  const std::string model = HugeConstantOnnx();
  ASSERT_LT(model.size(), 400u);
  grpc::Status st = s.Upload({"huge", model});
  EXPECT_EQ(st.error_code(), StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  EXPECT_NE(st.error_message().find("memory budget"), std::string::npos) << st.error_message();
  EXPECT_LT(PeakRss(s.pid()), int64_t{1536} << 20);
  EXPECT_EQ(s.GetModel("huge").error_code(), StatusCode::NOT_FOUND);
  ASSERT_TRUE(s.Upload({"example", ExampleOnnx()}).ok());
  EXPECT_TRUE(s.Predict("example", 8).ok());
}

TEST(Limits, ADeadlineStopsTheRunItBelongsTo) {
  TestServer s("limits_loop");
  s.Start();
  ASSERT_TRUE(s.Upload({"loop", CountingLoopOnnx()}).ok());
  v1::PredictResponse out;
  ASSERT_TRUE(s.Predict(LoopRequest(3), &out).ok());
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
    grpc::Status st = s.NewInferenceStub()->Predict(&ctx, LoopRequest(int64_t{1} << 40), &out);
    EXPECT_EQ(st.error_code(), StatusCode::DEADLINE_EXCEEDED) << st.error_message();
  }
  // The next request is not stuck behind the abandoned run (it stops within a step).
  const auto t0 = std::chrono::steady_clock::now();
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(3));
  grpc::Status st = s.NewInferenceStub()->Predict(&ctx, LoopRequest(3), &out);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  auto y = DecodeTensor(out.outputs().begin()->second, "y");
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->data<float>()[0], 3.0f);
  // Unloading does not wait on it either.
  const auto t1 = std::chrono::steady_clock::now();
  EXPECT_TRUE(s.Unload("loop", 0, false).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t1, std::chrono::seconds(2));
}

TEST(Limits, AnUploadWhoseClientHasGoneIsNotCommitted) {
  TestServer s("limits_cancel");
  s.Start();
  // Checked on the reference interpreter for seconds: the client's 1 s deadline passes first.
  UploadSpec slow{"slow", ConvChainOnnx(150, 32, 56)};
  slow.deadline = std::chrono::milliseconds(1000);
  grpc::Status st = s.Upload(slow);
  EXPECT_EQ(st.error_code(), StatusCode::DEADLINE_EXCEEDED) << st.error_message();
  // The build stopped at its next step: builds run one at a time, so the next upload would
  // wait seconds behind a build that went on.
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(s.Upload({"example", ExampleOnnx()}).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(1500));
  EXPECT_EQ(s.GetModel("slow").error_code(), StatusCode::NOT_FOUND);
  EXPECT_FALSE(fs::exists(s.repo() / "slow"));
  EXPECT_EQ(s.Readyz(), 200);
}

}  // namespace
}  // namespace kiln::server::testing

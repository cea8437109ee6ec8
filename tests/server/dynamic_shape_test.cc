// Dynamic dims at serve time, end to end: the GPT-style decoder of tests/models/text_model.py
// (its text model with a causal mask built from the run's sequence length; [batch, sequence]
// inputs) loaded with `dynamic_dims` instead of a fixed sequence size. Requests of several lengths are answered by engines built on
// demand and agree with the reference interpreter; a repeated length is a cache hit; a bad
// rank or disagreeing inputs are INVALID_ARGUMENT; `max_shape_engines: 2` evicts, as GetModel
// and /metrics count (all with `shape_classes: off`). With shape classes (the default) the
// padding proof holds for this model, every class's engines exist at READY, and every length
// of the range matches the reference with no build after READY. A decoder step with a cache is
// served by classes of its past the same way.
#include <cstdio>
#include <cstdlib>
#include <random>

#include "compiler/onnx/importer.h"
#include "ops/interpreter.h"
#include "tests/server/test_server.h"

namespace kiln::server::testing {
namespace {

using grpc::StatusCode;

// The decoder's bytes, written by its generator (Debian's python3-onnx); "" without it.
// KILN_TEXT_MODEL_ARGS passes sizes to it (`--hidden 256 --layers 4 --heads 4 --ffn 1024`
// measures the build time of a new shape on a larger encoder).
std::string TextModelOnnx(const fs::path& dir) {
  const char* extra = std::getenv("KILN_TEXT_MODEL_ARGS");
  const std::string cmd = "/usr/bin/python3 '" +
                          (SourceDir() / "tests/models/text_model.py").string() + "' --causal --write '" +
                          dir.string() + "' " + (extra ? extra : "") + " > /dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) return "";
  return ReadFile(dir / "model.onnx");
}

struct TextRequest {
  Tensor ids, mask;
};

TextRequest MakeRequest(int64_t batch, int64_t seq, uint32_t seed) {
  TextRequest r{Tensor(DType::kInt64, {batch, seq}), Tensor(DType::kInt64, {batch, seq})};
  std::mt19937 rng(seed);
  for (int64_t i = 0; i < batch * seq; ++i) {
    r.ids.mutable_data<int64_t>()[i] = static_cast<int64_t>(rng() % 1000);
    r.mask.mutable_data<int64_t>()[i] = (i % seq) < seq - 3 ? 1 : 0;  // some padding
  }
  return r;
}

class DynamicShapes : public ::testing::Test {
 protected:
  void SetUp() override {
    Load("device: cpu\nmax_batch_size: 2\ndynamic_dims: {sequence: 16}\nmax_shape_engines: 2\n"
         "shape_classes: off\n");
  }

  void Load(const std::string& config) {
    server_ = std::make_unique<TestServer>("dynshape");
    onnx_ = TextModelOnnx(server_->dir());
    if (onnx_.empty()) GTEST_SKIP() << "tests/models/text_model.py --write failed (python3-onnx?)";
    fs::create_directories(server_->repo() / "text/1");
    std::ofstream(server_->repo() / "text/1/model.onnx", std::ios::binary) << onnx_;
    std::ofstream(server_->repo() / "text/config.yaml") << config;
    server_->Start();
    ASSERT_TRUE(server_->WaitReady(180)) << "the text model did not become READY";
    auto graph = onnx_io::ImportModelBytes(onnx_);
    ASSERT_TRUE(graph.ok()) << graph.status();
    graph_ = std::move(*graph);
  }

  // Predicts `r` and compares every output with the reference interpreter on the raw model.
  void ExpectMatchesReference(const TextRequest& r) {
    v1::PredictRequest req;
    req.set_model("text");
    EncodeTensor(r.ids, false, &(*req.mutable_inputs())["input_ids"]);
    EncodeTensor(r.mask, false, &(*req.mutable_inputs())["attention_mask"]);
    v1::PredictResponse out;
    const auto t0 = std::chrono::steady_clock::now();
    grpc::Status s = server_->Predict(req, &out);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_TRUE(s.ok()) << s.error_message();
    std::printf("Predict [%ld, %ld]: %.0f ms\n", static_cast<long>(r.ids.dim(0)),
                static_cast<long>(r.ids.dim(1)), ms);
    auto want = ref::Run(*graph_, {{"input_ids", r.ids}, {"attention_mask", r.mask}});
    ASSERT_TRUE(want.ok()) << want.status();
    for (const auto& [name, w] : *want) {
      ASSERT_TRUE(out.outputs().count(name)) << name;
      auto got = DecodeTensor(out.outputs().at(name), name);
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_EQ(got->shape(), w.shape()) << name;
      for (int64_t i = 0; i < w.numel(); ++i) {
        ASSERT_NEAR(got->GetDouble(i), w.GetDouble(i), 1e-3 + 1e-3 * std::abs(w.GetDouble(i)))
            << name << " element " << i;
      }
    }
  }

  grpc::Status PredictRaw(const Tensor& ids, const Tensor& mask) {
    v1::PredictRequest req;
    req.set_model("text");
    EncodeTensor(ids, false, &(*req.mutable_inputs())["input_ids"]);
    EncodeTensor(mask, false, &(*req.mutable_inputs())["attention_mask"]);
    v1::PredictResponse out;
    return server_->Predict(req, &out);
  }

  v1::ModelInfo Info() {
    v1::ModelInfo info;
    EXPECT_TRUE(server_->GetModel("text", 0, &info).ok());
    return info;
  }

  std::string Metrics() {
    httplib::Client http("127.0.0.1", server_->http_port());
    auto r = http.Get("/metrics");
    return r ? r->body : "";
  }

  std::unique_ptr<TestServer> server_;
  std::string onnx_;
  std::unique_ptr<Graph> graph_;
};

TEST_F(DynamicShapes, ServesEveryLengthOnEnginesBuiltOnDemand) {
  v1::ModelInfo info = Info();
  ASSERT_EQ(info.inputs_size(), 2);
  EXPECT_EQ(std::vector<int64_t>(info.inputs(0).shape().begin(), info.inputs(0).shape().end()),
            (std::vector<int64_t>{-1, -1}));
  EXPECT_EQ(info.dynamic_dims().at("sequence"), 16);
  EXPECT_EQ(info.shape_engines_size(), 0);

  ExpectMatchesReference(MakeRequest(1, 16, 1));  // the warm-up size: the model's own engines
  EXPECT_EQ(Info().shape_counters().misses(), 0);
  ExpectMatchesReference(MakeRequest(1, 17, 2));  // new: built on demand
  ExpectMatchesReference(MakeRequest(2, 93, 3));  // new, at batch 2
  ExpectMatchesReference(MakeRequest(1, 17, 4));  // a hit: no build
  info = Info();
  EXPECT_EQ(info.shape_counters().misses(), 2);
  EXPECT_EQ(info.shape_counters().hits(), 1);
  EXPECT_EQ(info.shape_counters().builds(), 2);
  EXPECT_EQ(info.shape_counters().evictions(), 0);
  for (const auto& e : info.shape_engines()) {
    std::printf("shape %s: build %.0f ms\n", e.dims().c_str(), e.build_ms());
  }

  // Requests the model cannot take: a wrong rank, inputs that disagree on `sequence`.
  EXPECT_EQ(
      PredictRaw(Tensor(DType::kInt64, {1, 17, 1}), Tensor(DType::kInt64, {1, 17, 1})).error_code(),
      StatusCode::INVALID_ARGUMENT);
  grpc::Status s = PredictRaw(Tensor(DType::kInt64, {1, 17}), Tensor(DType::kInt64, {1, 18}));
  EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("sequence"), std::string::npos) << s.error_message();

  // A third length with max_shape_engines: 2 pushes out the least recently used (93); asking
  // for 93 again builds it again (and pushes out 17).
  ExpectMatchesReference(MakeRequest(1, 40, 5));
  ExpectMatchesReference(MakeRequest(2, 93, 6));
  info = Info();
  EXPECT_EQ(info.shape_counters().misses(), 4);
  EXPECT_EQ(info.shape_counters().evictions(), 2);
  ASSERT_EQ(info.shape_engines_size(), 2);
  EXPECT_EQ(info.shape_engines(0).dims(), "sequence=93");
  EXPECT_EQ(info.shape_engines(1).dims(), "sequence=40");
  const std::string metrics = Metrics();
  EXPECT_NE(metrics.find("kiln_shape_engine_evictions_total{model=\"text\"} 2"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("kiln_shape_engine_requests_total{model=\"text\",result=\"miss\"} 4"),
            std::string::npos);
  EXPECT_NE(metrics.find("kiln_shape_engine_build_seconds_count{model=\"text\"} 4"),
            std::string::npos);
}

class ShapeClassesServe : public DynamicShapes {
 protected:
  void SetUp() override {
    Load("device: cpu\nmax_batch_size: 2\n"
         "dynamic_dims: {sequence: {min: 1, max: 100, typical: 16}}\n");
  }
};

TEST_F(ShapeClassesServe, EveryLengthMatchesTheReferenceWithNoBuildAfterReady) {
  v1::ModelInfo info = Info();
  ASSERT_TRUE(info.shape_classes().count("sequence")) << info.shape_classes_refused();
  const auto& sizes = info.shape_classes().at("sequence").sizes();
  EXPECT_EQ(std::vector<int64_t>(sizes.begin(), sizes.end()),
            (std::vector<int64_t>{1, 16, 24, 32, 48, 64, 96, 100}));
  // Every class but the typical one (the model's own engines), at both buckets.
  EXPECT_EQ(info.shape_counters().prebuilt(), 14);
  for (int64_t seq : {1, 5, 16, 17, 24, 25, 63, 93, 100}) {
    ExpectMatchesReference(MakeRequest(1, seq, static_cast<uint32_t>(seq)));
    ExpectMatchesReference(MakeRequest(2, seq, static_cast<uint32_t>(seq) + 1000));
  }
  info = Info();
  EXPECT_EQ(info.shape_counters().builds(), 0);
  EXPECT_EQ(info.shape_counters().misses(), 0);
  EXPECT_EQ(info.shape_counters().evictions(), 0);
  EXPECT_EQ(Metrics().find("kiln_shape_engine_build_seconds_count{model=\"text\"}"),
            std::string::npos);
  grpc::Status s = PredictRaw(Tensor(DType::kInt64, {1, 101}), Tensor(DType::kInt64, {1, 101}));
  EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("[1, 100]"), std::string::npos) << s.error_message();
}

// A decoder step with a key/value cache (tests/models/decoder_step.py, test size) whose
// config narrows `past_sequence_length` to [1, 200] and `sequence` to [1, 1]: served by shape
// classes of the past, the mask's "past_sequence_length + sequence" padded region by region and
// the presents cut back; every past length matches the reference with no build after READY.
TEST(DecoderStepClasses, EveryPastLengthMatchesTheReferenceWithNoBuildAfterReady) {
  TestServer server("decstep");
  const std::string cmd = "/usr/bin/python3 '" +
                          (SourceDir() / "tests/models/decoder_step.py").string() + "' --write '" +
                          (server.dir() / "dec").string() + "' > /dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) GTEST_SKIP() << "decoder_step.py --write failed (python3-onnx?)";
  const std::string onnx = ReadFile(server.dir() / "dec/model.onnx");
  fs::create_directories(server.repo() / "dec/1");
  std::ofstream(server.repo() / "dec/1/model.onnx", std::ios::binary) << onnx;
  std::ofstream(server.repo() / "dec/config.yaml")
      << "device: cpu\nmax_batch_size: 2\n"
         "dynamic_dims: {past_sequence_length: [1, 200], sequence: [1, 1]}\n";
  server.Start();
  ASSERT_TRUE(server.WaitReady(180)) << "the decoder step did not become READY";
  auto graph = onnx_io::ImportModelBytes(onnx);
  ASSERT_TRUE(graph.ok()) << graph.status();
  v1::ModelInfo info;
  ASSERT_TRUE(server.GetModel("dec", 0, &info).ok());
  ASSERT_TRUE(info.shape_classes().count("past_sequence_length")) << info.shape_classes_refused();
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  for (int64_t past : {1, 2, 17, 128, 129, 200}) {
    ref::TensorMap feed;
    feed["input_ids"] = Tensor::FromInt64({static_cast<int64_t>(rng() % 1000)}, {1, 1});
    feed["position_ids"] = Tensor::FromInt64({past}, {1, 1});
    feed["attention_mask"] = Tensor(DType::kInt64, {1, past + 1});
    for (int64_t i = 0; i <= past; ++i) feed["attention_mask"].mutable_data<int64_t>()[i] = 1;
    for (const Value* in : (*graph)->inputs) {
      if (in->name.rfind("past_key_values", 0) != 0) continue;
      Tensor t(DType::kFloat32, {1, 4, past, 16});
      for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = normal(rng);
      feed[in->name] = t;
    }
    v1::PredictRequest req;
    req.set_model("dec");
    for (const auto& [name, t] : feed) EncodeTensor(t, false, &(*req.mutable_inputs())[name]);
    v1::PredictResponse out;
    grpc::Status s = server.Predict(req, &out);
    ASSERT_TRUE(s.ok()) << "past " << past << ": " << s.error_message();
    auto want = ref::Run(**graph, feed);
    ASSERT_TRUE(want.ok()) << want.status();
    for (const auto& [name, w] : *want) {
      auto got = DecodeTensor(out.outputs().at(name), name);
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_EQ(got->shape(), w.shape()) << name << " at past " << past;
      for (int64_t i = 0; i < w.numel(); ++i) {
        ASSERT_NEAR(got->GetDouble(i), w.GetDouble(i), 1e-4 + 1e-3 * std::abs(w.GetDouble(i)))
            << name << " at past " << past << ", element " << i;
      }
    }
  }
  ASSERT_TRUE(server.GetModel("dec", 0, &info).ok());
  EXPECT_EQ(info.shape_counters().builds(), 0);
  EXPECT_GT(info.shape_counters().prebuilt(), 0);
}

}  // namespace
}  // namespace kiln::server::testing

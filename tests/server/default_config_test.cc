// A text encoder exported with dynamic axes loads as uploaded: the BERT-shaped encoder of
// tests/models/text_model.py ([batch, sequence] inputs, token ids into a 1000-row vocabulary,
// a 0/1 attention mask applied as (1 - mask) * -10000, a 512-row position table) in a
// repository with no model config, on kilnd's default config. It must become READY (the
// warm-up feed draws ids inside the vocabulary and the mask from {0, 1}; `sequence` gets the
// profile [1, 512] from the position table, built and checked at 128), answer at two
// sequence lengths as the reference interpreter does, and refuse one beyond 512 naming the
// range. KILN_TEXT_MODEL_ARGS="--hidden 768 --layers 12 --heads 12 --ffn 3072" runs it at
// BERT-base size (the load time and the check's error are printed).
#include <cstdio>
#include <cstdlib>
#include <random>

#include "compiler/onnx/importer.h"
#include "compiler/onnx/tensor_proto.h"
#include "ops/interpreter.h"
#include "tests/server/test_server.h"

namespace kiln::server::testing {
namespace {

using grpc::StatusCode;

std::string EncoderOnnx(const fs::path& dir) {
  const char* extra = std::getenv("KILN_TEXT_MODEL_ARGS");
  const std::string cmd = "/usr/bin/python3 '" +
                          (SourceDir() / "tests/models/text_model.py").string() + "' --write '" +
                          dir.string() + "' " + (extra ? extra : "") + " > /dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) return "";
  return ReadFile(dir / "model.onnx");
}

v1::PredictRequest Request(int64_t seq, uint32_t seed, Tensor* ids, Tensor* mask) {
  *ids = Tensor(DType::kInt64, {1, seq});
  *mask = Tensor(DType::kInt64, {1, seq});
  std::mt19937 rng(seed);
  for (int64_t i = 0; i < seq; ++i) {
    ids->mutable_data<int64_t>()[i] = static_cast<int64_t>(rng() % 1000);
    mask->mutable_data<int64_t>()[i] = i < seq - 2 ? 1 : 0;  // padded at the end
  }
  v1::PredictRequest req;
  req.set_model("bert");
  EncodeTensor(*ids, false, &(*req.mutable_inputs())["input_ids"]);
  EncodeTensor(*mask, false, &(*req.mutable_inputs())["attention_mask"]);
  return req;
}

TEST(DefaultConfig, ASymbolicSequenceEncoderLoadsAndServesItsRange) {
  TestServer server("default_config");
  const std::string onnx = EncoderOnnx(server.dir());
  if (onnx.empty()) GTEST_SKIP() << "tests/models/text_model.py --write failed (python3-onnx?)";
  fs::create_directories(server.repo() / "bert/1");
  std::ofstream(server.repo() / "bert/1/model.onnx", std::ios::binary) << onnx;
  const auto t0 = std::chrono::steady_clock::now();
  server.Start("", "model_defaults: {}\n");  // kilnd's own defaults (cpu, batches 1..8)
  ASSERT_TRUE(server.WaitReady(900)) << "the encoder did not become READY";
  std::printf("time to READY: %.1f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  v1::ModelInfo info;
  ASSERT_TRUE(server.GetModel("bert", 0, &info).ok());
  ASSERT_EQ(info.state(), v1::MODEL_STATE_READY) << info.reason();
  EXPECT_TRUE(info.check().ran() && info.check().ok()) << info.check().message();
  EXPECT_EQ(info.check().disabled_passes_size(), 0) << info.check().message();
  std::printf("check: max abs err %.3g, max rel err %.3g; reference %.0f ms, check %.0f ms\n",
              info.check().max_abs_err(), info.check().max_rel_err(),
              info.load_times().reference_ms(), info.load_times().check_ms());
  EXPECT_EQ(info.dynamic_dims().at("sequence"), 128);
  EXPECT_EQ(info.dynamic_dim_ranges().at("sequence").min(), 1);
  EXPECT_EQ(info.dynamic_dim_ranges().at("sequence").max(), 512);
  EXPECT_EQ(info.inputs(0).shape(1), -1);

  auto graph = onnx_io::ImportModelBytes(onnx);
  ASSERT_TRUE(graph.ok()) << graph.status();
  for (int64_t seq : {128, 45}) {  // the model's own engines, then one built for 45
    Tensor ids, mask;
    v1::PredictResponse out;
    grpc::Status s = server.Predict(Request(seq, static_cast<uint32_t>(seq), &ids, &mask), &out);
    ASSERT_TRUE(s.ok()) << seq << ": " << s.error_message();
    auto want = ref::Run(**graph, {{"input_ids", ids}, {"attention_mask", mask}});
    ASSERT_TRUE(want.ok()) << want.status();
    double worst = 0;
    for (const auto& [name, w] : *want) {
      auto got = DecodeTensor(out.outputs().at(name), name);
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_EQ(got->shape(), w.shape()) << name;
      for (int64_t i = 0; i < w.numel(); ++i) {
        const double err = std::abs(got->GetDouble(i) - w.GetDouble(i));
        worst = std::max(worst, err);
        ASSERT_LE(err, 1e-3 + 1e-3 * std::abs(w.GetDouble(i))) << name << " element " << i;
      }
    }
    std::printf("sequence %ld: max abs err vs the reference %.3g\n", static_cast<long>(seq), worst);
  }
  Tensor ids, mask;
  v1::PredictResponse out;
  grpc::Status s = server.Predict(Request(600, 1, &ids, &mask), &out);
  EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_NE(s.error_message().find("[1, 512]"), std::string::npos) << s.error_message();
}

// Sample inputs shipped beside the model (test_data_set_0/input_*.pb, the ONNX test layout)
// feed the check, and their sequence length (24) is the one the model is built at.
TEST(DefaultConfig, ShippedSamplesSetTheWarmupShape) {
  TestServer server("default_config_samples");
  const std::string onnx = EncoderOnnx(server.dir());
  if (onnx.empty()) GTEST_SKIP() << "tests/models/text_model.py --write failed (python3-onnx?)";
  const fs::path version = server.repo() / "bert/1";
  fs::create_directories(version / "test_data_set_0");
  std::ofstream(version / "model.onnx", std::ios::binary) << onnx;
  Tensor ids, mask;
  Request(24, 3, &ids, &mask);
  ASSERT_TRUE(
      onnx_io::WriteTensorFile(ids, "input_ids", (version / "test_data_set_0/input_0.pb").string())
          .ok());
  ASSERT_TRUE(onnx_io::WriteTensorFile(mask, "attention_mask",
                                       (version / "test_data_set_0/input_1.pb").string())
                  .ok());
  server.Start("", "model_defaults: {max_batch_size: 2}\n");
  ASSERT_TRUE(server.WaitReady(300));
  v1::ModelInfo info;
  ASSERT_TRUE(server.GetModel("bert", 0, &info).ok());
  EXPECT_TRUE(info.check().ok()) << info.check().message();
  EXPECT_EQ(info.dynamic_dims().at("sequence"), 24);
  EXPECT_EQ(info.dynamic_dim_ranges().at("sequence").max(), 512);
}

}  // namespace
}  // namespace kiln::server::testing

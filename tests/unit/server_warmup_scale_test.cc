// The warm-up check on the BERT-shaped encoder of tests/models/text_model.py (symbolic
// [batch, sequence], no config): it passes a correct float32 engine (the feed follows the
// model's inputs, the comparison each output's scale), and it still catches an engine whose
// output is off by a percent of the scale in one token's row, or a pass that scales the
// output's weights by 1.01. KILN_TEXT_MODEL_ARGS="--hidden 768 --layers 12 --heads 12 --ffn 3072
// --vocab 30522" runs it at BERT-base size; the error figures are printed.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "compiler/onnx/importer.h"
#include "compiler/passes/pass.h"
#include "compiler/pipeline.h"
#include "compiler/shape/infer.h"
#include "runtime/check/differential.h"
#include "server/model/model_builder.h"

namespace kiln::server {
namespace {
namespace fs = std::filesystem;

std::unique_ptr<Graph> Encoder() {
  const char* src = std::getenv("KILN_SOURCE_DIR");
  if (!src) return nullptr;
  const fs::path dir = fs::path(::testing::TempDir()) / ("kiln_scale_" + std::to_string(getpid()));
  const char* extra = std::getenv("KILN_TEXT_MODEL_ARGS");
  const std::string cmd = std::string("/usr/bin/python3 '") + src +
                          "/tests/models/text_model.py' --write '" + dir.string() + "' " +
                          (extra ? extra : "") + " > /dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) return nullptr;
  auto g = onnx_io::ImportModelFile((dir / "model.onnx").string());
  fs::remove_all(dir);
  return g.ok() ? std::move(*g) : nullptr;
}

ModelConfig OneBucket() {
  ModelConfig c;
  c.max_batch_size = 1;
  c.cpu_layout = "primitive";  // no tuning: the check is the subject
  EXPECT_TRUE(FinalizeModelConfig(c).ok());
  return c;
}

TEST(WarmupScale, ACorrectEnginePassesAndAPercentOffOneTokenFails) {
  auto model = Encoder();
  if (!model) GTEST_SKIP() << "tests/models/text_model.py --write failed (python3-onnx?)";
  auto built = BuildModel(*model, OneBucket(), nullptr);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_TRUE(built->check.ok && built->check.disabled_passes.empty()) << built->check.message;
  std::printf("warm-up check: max abs err %.3g, max rel err %.3g\n", built->check.max_abs_err,
              built->check.max_rel_err);
  // The same comparison by hand, on the engine's own output and on a perturbed copy.
  const int64_t seq = built->signature.default_dims.at("sequence");
  auto raw = model->Clone();
  ASSERT_TRUE(shape::Specialize(*raw, 1, {{"sequence", seq}}).ok());
  auto feed = check::RandomInputs(*raw, check::WithInputHints(*raw, check::InputRanges{}));
  ASSERT_TRUE(feed.ok()) << feed.status();
  auto want = ref::Run(*raw, *feed);
  ASSERT_TRUE(want.ok()) << want.status();
  runtime::Engine& engine = *built->engines.at(1).at(0);
  std::vector<Tensor> in, out;
  for (const auto& s : engine.inputs()) in.push_back(feed->at(s.name));
  ASSERT_TRUE(engine.Run(in, out).ok());
  ref::TensorMap got;
  for (size_t i = 0; i < out.size(); ++i) got[engine.outputs()[i].name] = out[i];
  const check::Tolerance tol = check::ScaledToOutputs(*want, check::Tolerance{});
  const check::Divergence good = check::CompareOutputs(*want, got, tol);
  EXPECT_TRUE(good.ok) << good.message;
  // One token's hidden state off by 1% of the output's scale (a kernel that mishandles one
  // row): caught.
  Tensor& h = got.at("last_hidden_state");
  const int64_t hidden = h.dim(2);
  const double scale = tol.output_atol.at("last_hidden_state") / tol.rtol;
  for (int64_t j = 0; j < hidden; ++j) {
    h.SetDouble(3 * hidden + j, h.GetDouble(3 * hidden + j) + 0.01 * scale);
  }
  const check::Divergence bad = check::CompareOutputs(*want, got, tol);
  EXPECT_FALSE(bad.ok);
  std::printf("correct engine: max abs err %.3g (allowed %.3g); perturbed: %.3g, %s\n",
              good.max_abs_err, tol.output_atol.at("last_hidden_state"), bad.max_abs_err,
              bad.message.c_str());
}

// A pass that scales by 1.01 the float weights (more than one element) read by the node that
// produces each graph output: a kernel off by a percent at the end of the model, a fraction
// of what a wrong kernel usually does. (kilnd's --enable-test-faults pass moves the first
// constant a node reads by 1, here the mask's -10000, which changes nothing measurable.)
class NudgeOutputWeights : public passes::Pass {
 public:
  std::string name() const override { return "test_nudge_output_weights"; }

 protected:
  absl::StatusOr<bool> RunImpl(Graph& graph) override {
    bool changed = false;
    for (const Value* out : graph.outputs) {
      Node* n = out->producer;
      for (size_t k = 0; n && k < n->inputs.size(); ++k) {
        Value*& in = n->inputs[k];
        if (!in || !in->is_constant() || in->dtype != DType::kFloat32 ||
            in->constant->numel() < 2) {
          continue;
        }
        Tensor t = in->constant->Clone();
        for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] *= 1.01f;
        in = graph.AddConstant(in->name + "_nudged", std::move(t));
        changed = true;
      }
    }
    if (changed) graph.PruneUnusedValues();
    return changed;
  }
};

TEST(WarmupScale, APassOffByAPercentIsCaughtAndDisabled) {
  auto model = Encoder();
  if (!model) GTEST_SKIP() << "tests/models/text_model.py --write failed (python3-onnx?)";
  ASSERT_TRUE(RegisterTestPass(
                  "test_nudge_output_weights",
                  [] { return std::make_unique<NudgeOutputWeights>(); }, "eliminate_dead_code")
                  .ok());
  auto built = BuildModel(*model, OneBucket(), nullptr);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(built->check.disabled_passes.count("test_nudge_output_weights"), 1u)
      << built->check.message;
  std::printf("broken pass: %s; max abs err over both attempts %.3g\n",
              built->check.message.c_str(), built->check.max_abs_err);
}

}  // namespace
}  // namespace kiln::server

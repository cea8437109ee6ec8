#include "compiler/pipeline.h"

#include <algorithm>
#include <functional>
#include <map>

#include "base/stop.h"
#include "compiler/passes/eliminate_common_subexpressions.h"
#include "compiler/passes/eliminate_dead_code.h"
#include "compiler/passes/eliminate_identity.h"
#include "compiler/passes/fold_batchnorm.h"
#include "compiler/passes/fold_channel_shuffle.h"
#include "compiler/passes/fold_constants.h"
#include "compiler/passes/fold_pad.h"
#include "compiler/passes/fold_repeat_into_matmul.h"
#include "compiler/passes/fold_scale_into_weights.h"
#include "compiler/passes/fold_transpose_into_matmul.h"
#include "compiler/passes/fuse_concat_elementwise.h"
#include "compiler/passes/fuse_conv_epilogue.h"
#include "compiler/passes/fuse_elementwise.h"
#include "compiler/passes/fuse_matmul_epilogue.h"
#include "compiler/passes/fuse_qdq.h"
#include "compiler/passes/inline_constant_if.h"
#include "compiler/passes/lower_einsum.h"
#include "compiler/passes/recognize_patterns.h"
#include "compiler/passes/simplify_reshapes.h"

namespace kiln {
namespace {

const std::map<std::string, PassFactory>& Factories() {
  static const auto* factories = new std::map<std::string, PassFactory>{
      {"fold_constants", [] { return std::make_unique<passes::FoldConstantsPass>(); }},
      {"eliminate_identity", [] { return std::make_unique<passes::EliminateIdentityPass>(); }},
      {"eliminate_common_subexpressions",
       [] { return std::make_unique<passes::EliminateCommonSubexpressionsPass>(); }},
      {"eliminate_dead_code", [] { return std::make_unique<passes::EliminateDeadCodePass>(); }},
      {"fold_batchnorm", [] { return std::make_unique<passes::FoldBatchNormPass>(); }},
      {"fuse_conv_epilogue", [] { return std::make_unique<passes::FuseConvEpiloguePass>(); }},
      {"fuse_matmul_epilogue", [] { return std::make_unique<passes::FuseMatMulEpiloguePass>(); }},
      {"fold_transpose_into_matmul",
       [] { return std::make_unique<passes::FoldTransposeIntoMatMulPass>(); }},
      {"fold_repeat_into_matmul",
       [] { return std::make_unique<passes::FoldRepeatIntoMatMulPass>(); }},
      {"fuse_elementwise", [] { return std::make_unique<passes::FuseElementwisePass>(); }},
      {"fuse_concat_elementwise",
       [] { return std::make_unique<passes::FuseConcatElementwisePass>(); }},
      {"fuse_qdq", [] { return std::make_unique<passes::FuseQdqPass>(); }},
      {"lower_einsum", [] { return std::make_unique<passes::LowerEinsumPass>(); }},
      {"inline_constant_if", [] { return std::make_unique<passes::InlineConstantIfPass>(); }},
      {"recognize_patterns", [] { return std::make_unique<passes::RecognizePatternsPass>(); }},
      {"simplify_reshapes", [] { return std::make_unique<passes::SimplifyReshapesPass>(); }},
      {"fold_pad", [] { return std::make_unique<passes::FoldPadPass>(); }},
      {"fold_channel_shuffle", [] { return std::make_unique<passes::FoldChannelShufflePass>(); }},
      {"fold_scale_into_weights",
       [] { return std::make_unique<passes::FoldScaleIntoWeightsPass>(); }},
      {"assign_precision", [] { return std::make_unique<passes::AssignPrecisionPass>(); }},
      {"quantize_int8", [] { return std::make_unique<passes::QuantizeInt8Pass>(nullptr); }},
  };
  return *factories;
}

struct TestPass {
  std::string name;
  PassFactory factory;
  std::string after;
};

// Written only by RegisterTestPass (tests, kilnd --enable-test-faults); empty in production.
std::vector<TestPass>& TestPasses() {
  static auto* passes = new std::vector<TestPass>;
  return *passes;
}

const TestPass* FindTestPass(const std::string& name) {
  for (const TestPass& t : TestPasses()) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

bool KnownPass(const std::string& name) {
  return Factories().count(name) > 0 || FindTestPass(name) != nullptr;
}

std::vector<std::string> LevelPasses(OptLevel level);

}  // namespace

absl::Status RegisterTestPass(const std::string& name, PassFactory factory,
                              const std::string& after) {
  if (name.rfind("test_", 0) != 0) {
    return absl::InvalidArgumentError("a test pass name must start with 'test_': " + name);
  }
  if (KnownPass(name)) return absl::AlreadyExistsError("pass '" + name + "' exists");
  if (!KnownPass(after)) return absl::InvalidArgumentError("unknown pass '" + after + "'");
  TestPasses().push_back(TestPass{name, std::move(factory), after});
  return absl::OkStatus();
}

std::set<std::string> PassesOffFor(const std::string& backend, bool int8_dot_product) {
  // fuse_concat_elementwise: the generated element-wise kernels read one tensor per operand.
  if (backend.rfind("cuda", 0) == 0) return {"fuse_qdq", "fold_pad", "fuse_concat_elementwise"};
  if (backend == "cpu" && !int8_dot_product) return {"fuse_qdq"};
  return {};
}

std::vector<std::string> PipelinePasses(OptLevel level) {
  std::vector<std::string> names = LevelPasses(level);
  for (const TestPass& t : TestPasses()) {
    auto at = std::find(names.begin(), names.end(), t.after);
    if (at != names.end()) names.insert(at + 1, t.name);
  }
  return names;
}

absl::StatusOr<OptLevel> ParseOptLevel(const std::string& s) {
  std::string t = s;
  while (!t.empty() && t[0] == '-') t.erase(0, 1);
  if (!t.empty() && (t[0] == 'O' || t[0] == 'o')) t.erase(0, 1);
  if (t == "0") return OptLevel::kO0;
  if (t == "1") return OptLevel::kO1;
  if (t == "2") return OptLevel::kO2;
  return absl::InvalidArgumentError("unknown optimization level '" + s + "' (O0, O1, O2)");
}

namespace {

std::vector<std::string> LevelPasses(OptLevel level) {
  if (level == OptLevel::kO0) return {};
  // Folding first: once the batch is bound, shape subgraphs become constants and expose
  // no-op reshapes to eliminate_identity. CSE after that sees canonical inputs. Dead code
  // last: every earlier pass leaves unused values behind.
  // lower_einsum at O1 too: an Einsum has no backend kernel (it runs on the reference
  // fallback), the MatMul it becomes has one. It needs the static shapes that folding and
  // binding the batch give, and it comes before CSE (two Einsums that transpose one operand
  // the same way share the Transpose) and, at O2, before simplify_reshapes (a Transpose it
  // adds merges with the exporter's) and the epilogue fusion (the MatMul takes a bias/scale).
  // inline_constant_if right after the first folding, which makes shape tests constant: the
  // branch's nodes then go through every pass after it (an If runs on the reference
  // fallback, its whole branch with it).
  std::vector<std::string> o1 = {"fold_constants",
                                 "inline_constant_if",
                                 "eliminate_identity",
                                 "lower_einsum",
                                 "eliminate_common_subexpressions",
                                 "fold_constants",
                                 "eliminate_dead_code"};
  if (level == OptLevel::kO1) return o1;
  // O2: BatchNorm folds into the Conv/Gemm before it once constants are folded; the fusions
  // that follow see one op where there were two.
  std::vector<std::string> o2 = o1;
  // Element-wise fusion comes after the epilogue fusions, which take the activations that
  // can run as post-ops of a convolution or matrix product.
  // fold_transpose_into_matmul after the epilogue fusion, which fuses only plain MatMul/Gemm
  // (a MatMul it turns into a FusedMatMul first would lose its bias and activation).
  // fold_repeat_into_matmul after it: the key's Transpose sits on the repeated operand's
  // Reshape until then.
  o2.insert(o2.end() - 1, {"fold_batchnorm", "fuse_conv_epilogue", "fuse_matmul_epilogue",
                           "fold_transpose_into_matmul", "fold_repeat_into_matmul",
                           "fuse_elementwise", "fuse_concat_elementwise"});
  // recognize_patterns after the first fold_constants/eliminate_identity (in-graph constants
  // such as sqrt(2) are literals by then, no Identity sits inside a chain) and before CSE
  // (two LayerNorms of one x would share their normalization chain, whose values then have
  // readers outside either pattern) and before the epilogue fusions (which take Gelu and
  // HardSwish as activations, not their primitive chains).
  o2.insert(std::find(o2.begin(), o2.end(), "eliminate_identity") + 1, "recognize_patterns");
  // simplify_reshapes after CSE: duplicate reshapes are merged first, so its one-reader
  // checks see the final readers.
  o2.insert(std::find(o2.begin(), o2.end(), "eliminate_common_subexpressions") + 1,
            "simplify_reshapes");
  // fold_channel_shuffle after simplify_reshapes: a channel shuffle's reshapes are single
  // Reshapes to constant shapes by then.
  o2.insert(std::find(o2.begin(), o2.end(), "simplify_reshapes") + 1, "fold_channel_shuffle");
  // fold_scale_into_weights right after fold_batchnorm: a BN folded into its Conv puts a
  // following per-channel Mul/Add directly after the Conv; folding it before the epilogue
  // fusions lets Conv -> Mul -> Relu fuse as Conv + Relu.
  o2.insert(std::find(o2.begin(), o2.end(), "fold_batchnorm") + 1, "fold_scale_into_weights");
  // fold_pad after the constants are folded (a Pad's pads are often a computed tensor) and
  // before the epilogue fusions, which it does not affect: only the Conv's input changes.
  o2.insert(std::find(o2.begin(), o2.end(), "fold_batchnorm"), "fold_pad");
  // fuse_qdq first of all: fold_constants would turn a small DequantizeLinear of int8
  // weights into float weights (it folds outputs up to 64 KiB), and the int8 convolution
  // needs the quantized weights and their scales.
  o2.insert(o2.begin(), "fuse_qdq");
  return o2;
}

}  // namespace

std::vector<std::string> AllPassNames() {
  std::vector<std::string> names;
  for (const auto& [name, f] : Factories()) names.push_back(name);
  for (const TestPass& t : TestPasses()) names.push_back(t.name);
  return names;
}

absl::StatusOr<std::unique_ptr<passes::Pass>> MakePass(const std::string& name) {
  if (const TestPass* t = FindTestPass(name)) return t->factory();
  auto it = Factories().find(name);
  if (it == Factories().end()) return absl::InvalidArgumentError("unknown pass '" + name + "'");
  return it->second();
}

absl::StatusOr<std::vector<passes::PassStats>> RunPipeline(Graph& graph,
                                                           const PipelineOptions& options) {
  for (const std::string& d : options.disabled) {
    if (!KnownPass(d)) return absl::InvalidArgumentError("unknown pass '" + d + "'");
  }
  std::vector<std::string> names = PipelinePasses(options.level);
  if (options.prefix >= 0 && static_cast<size_t>(options.prefix) < names.size()) {
    names.resize(options.prefix);
  }
  const bool lower = passes::IsLowerPrecision(options.precision);
  const bool int8 = passes::IsInt8Precision(options.precision);
  if (!lower && !int8 && options.precision != "float32") {
    return absl::InvalidArgumentError("unknown precision '" + options.precision +
                                      "' (float32, int8, int8-mixed, bf16, bf16-mixed)");
  }
  // Last: it marks the products the fusions produced; a bisection's prefix runs without it
  // (the reference ignores it anyway).
  if (lower && options.prefix < 0 && options.level != OptLevel::kO0) names.push_back("assign_precision");
  // int8: once BatchNorm and per-channel scales are folded into the weights (which are then
  // quantized as served) and before the epilogue fusions (which would hide the Relu the
  // quantization folds); fuse_qdq again right after, to lower what it wrote.
  auto folded = std::find(names.begin(), names.end(), "fold_scale_into_weights");
  if (int8 && options.prefix < 0 && folded != names.end()) {
    names.insert(folded + 1, {"quantize_int8", "fuse_qdq"});
  }
  std::vector<passes::PassStats> stats;
  for (const std::string& name : names) {
    if (options.disabled.count(name)) continue;
    std::unique_ptr<passes::Pass> pass;
    if (name == "assign_precision") {
      pass = std::make_unique<passes::AssignPrecisionPass>(options.precision);  // the factory's is bf16
    } else if (name == "quantize_int8") {
      const double kept = options.precision == "int8-mixed" ? options.int8_noise_kept : 1.0;
      pass = std::make_unique<passes::QuantizeInt8Pass>(options.calibration, kept);
    } else {
      ASSIGN_OR_RETURN(pass, MakePass(name));
    }
    if (options.fold_cache) pass->ShareFolds(options.fold_cache);
    RETURN_IF_ERROR(CheckStop());
    ASSIGN_OR_RETURN(passes::PassStats s, pass->Run(graph, options.verify));
    stats.push_back(std::move(s));
  }
  return stats;
}

}  // namespace kiln

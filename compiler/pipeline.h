// The pass pipeline, as data: the ordered pass list per optimization level lives in
// pipeline.cc, in one place. Passes are enabled or disabled by name (config, command line,
// and the differential check's bisection).
#pragma once

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"
#include "compiler/passes/assign_precision.h"
#include "compiler/passes/fold_cache.h"
#include "compiler/passes/pass.h"
#include "compiler/passes/quantize_int8.h"
#include "ir/graph.h"

namespace kiln {

enum class OptLevel { kO0 = 0, kO1 = 1, kO2 = 2 };

absl::StatusOr<OptLevel> ParseOptLevel(const std::string& s);  // "O0", "-O2", "2"

struct PipelineOptions {
  OptLevel level = OptLevel::kO2;
  std::set<std::string> disabled;  // pass names to skip
  bool verify = true;              // run the IR verifier after every pass
  // Run only the first `prefix` passes of the level (-1: all); the bisection uses it.
  int prefix = -1;
  // Shared by the compiles of one model (its batch buckets): fold_constants folds each
  // large constant once and fold_batchnorm rescales each weight once
  // (compiler/passes/fold_cache.h). Null: no sharing.
  std::shared_ptr<passes::FoldCache> fold_cache;
  // "float32" (exact: the default) or a lower one (passes::IsLowerPrecision: "bf16",
  // "bf16-mixed"): assign_precision then runs after
  // the level's passes and marks the weight products a backend may compute in bfloat16
  // (bf16-mixed keeps attention's score projections in float32: assign_precision.h).
  // "int8" (precision_int8): quantize_int8 and a second fuse_qdq run after the weights are
  // folded, quantizing the weight products with the activation ranges in `calibration`;
  // "int8-mixed" the same with the noisiest products left float, those quantized carrying
  // at most `int8_noise_kept` of the estimated quantization noise (quantize_int8.h).
  std::string precision = "float32";
  std::shared_ptr<const passes::Calibration> calibration;
  double int8_noise_kept = 1.0;
};

// Passes whose output a backend has no fast kernels for, so they stay off there. "cuda" (or
// "cuda:N") has no int8 convolution yet: fuse_qdq's QLinearConv would move every quantized
// convolution to the host, while DQ -> Conv -> Q stays on the GPU in float. "cpu" without an
// int8 dot product (`int8_dot_product`: runtime/cpu/isa.h, no VNNI): oneDNN's int8 kernels
// would saturate, and QLinearConv's exact float32 path is slower than the float Conv with
// its Q/DQ fused around it, which computes the original graph exactly. "cuda" has no
// fold_pad either: cuDNN pads both ends of a dim alike, so a Conv that took an asymmetric Pad
// would run on the host, while the Pad alone is a generated kernel.
std::set<std::string> PassesOffFor(const std::string& backend, bool int8_dot_product = true);

// The pass names of a level, in order (before `disabled` is applied).
std::vector<std::string> PipelinePasses(OptLevel level);
// Every pass name Kiln knows (for validating --disable lists).
std::vector<std::string> AllPassNames();
absl::StatusOr<std::unique_ptr<passes::Pass>> MakePass(const std::string& name);

using PassFactory = std::function<std::unique_ptr<passes::Pass>()>;

// Test-only: adds the pass `name` to every level's pipeline right after the first occurrence
// of `after` (levels without `after` are unchanged). It exists so tests can prove that the
// warm-up check catches and repairs a broken pass end to end; production code never calls
// it (kilnd only under its hidden --enable-test-faults flag). The name must start with
// "test_" so a registered pass is obvious in every report, and must be new. Not thread-safe:
// register before any pipeline runs; registrations last for the process.
absl::Status RegisterTestPass(const std::string& name, PassFactory factory,
                              const std::string& after);

absl::StatusOr<std::vector<passes::PassStats>> RunPipeline(Graph& graph,
                                                           const PipelineOptions& options);

}  // namespace kiln

// The differential check: the optimized graph must compute what the original graph computes.
// Both run on the reference interpreter with the same seeded random inputs; outputs are
// compared within a tolerance. When they diverge, the pipeline is replayed one pass at a
// time to name the first pass that moved the answer (the bisection the server uses to switch
// a broken pass off for one model).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "compiler/pipeline.h"
#include "ir/graph.h"
#include "ops/interpreter.h"
#include "runtime/check/compare.h"

namespace kiln::check {

struct InputRanges {
  uint64_t seed = 1234;
  double float_lo = -1.0, float_hi = 1.0;
  int64_t int_lo = 0, int_hi = 10;  // inclusive; e.g. token ids must stay in the vocabulary
  std::map<std::string, std::pair<double, double>> per_input;  // overrides by input name
  // Inputs drawn from {0, 1} only (masks, input_hints.h), floats included; per_input wins.
  std::set<std::string> binary;
};

// `ranges` with the graph's input hints (input_hints.h) added: table indices within their
// table, masks binary. An input already in `per_input` (the user's ranges) keeps its range.
InputRanges WithInputHints(const Graph& graph, InputRanges ranges);

// One tensor per graph input (shapes must be static: Specialize first).
absl::StatusOr<ref::TensorMap> RandomInputs(const Graph& graph, const InputRanges& ranges);

// The same feed with IEEE edge values sprinkled into every floating-point input (about one
// element in 11 becomes NaN, +Inf, -Inf, -0 or a denormal), seeded: the second feed of the
// warm-up check and of `kiln check --nonfinite`, so a fused kernel that computes NaN or an
// infinity differently from the ops it replaces is seen before a model serves.
ref::TensorMap WithNonFiniteValues(const ref::TensorMap& feed, uint64_t seed);

// A batch of `rows` built from the rows (dim 0) of `sources`, cycling through all their rows
// in order (sources[0]'s rows, then sources[1]'s, ...): every tensor name must be in every
// source, with the same dims past the first. The larger buckets of a batchable model are
// checked on such batches against the reference outputs of the rows they repeat.
absl::StatusOr<ref::TensorMap> TileRows(const std::vector<const ref::TensorMap*>& sources,
                                        int64_t rows);

Divergence CompareOutputs(const ref::TensorMap& want, const ref::TensorMap& got,
                          const Tolerance& tol);

// The tolerance for an int8 (QDQ) model: fuse_qdq's QLinearConv may requantize a value one
// quantum away from where the float Conv + QuantizeLinear put it (a tie broken by float
// rounding), which moves an output by about one 8-bit step of its range. So for a graph
// with QuantizeLinear (or QLinear ops) every float output's atol is at least one step of
// its expected values' range, (max - min) / 255; any other graph keeps `base`.
Tolerance ForQuantizedGraph(const Graph& raw, const ref::TensorMap& want, Tolerance base);

// The tolerance scaled to each float output's magnitude: its atol is at least rtol times the
// root mean square of its finite expected values. A float32 engine's rounding through many
// layers moves an element near zero by a fraction of the output's scale, not of that
// element, and an elementwise rtol alone fails it there; a wrong kernel moves elements by
// far more than rtol of the scale and still fails.
Tolerance ScaledToOutputs(const ref::TensorMap& want, Tolerance base);

struct PassOutcome {
  std::string pass;
  Divergence divergence;  // of the graph after this pass vs the raw graph
};

struct BisectResult {
  bool ok = true;               // every prefix matched
  std::string first_bad_pass;   // empty when ok
  std::vector<PassOutcome> passes;
};

// Runs `raw` (shapes static) and then the pipeline one pass at a time, comparing after each
// pass; stops at the first divergence.
absl::StatusOr<BisectResult> BisectPipeline(const Graph& raw, const PipelineOptions& options,
                                            const ref::TensorMap& inputs, const Tolerance& tol);
// The same over an explicit pass list (tests inject deliberately broken passes this way).
absl::StatusOr<BisectResult> BisectPasses(const Graph& raw,
                                          const std::vector<std::unique_ptr<passes::Pass>>& list,
                                          const ref::TensorMap& inputs, const Tolerance& tol);

}  // namespace kiln::check

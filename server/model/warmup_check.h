// The warm-up check's feeds and comparisons (internal to server/: model_builder.cc runs them
// per bucket). The reference runs once per model on the smallest bucket's seeded feed (and a
// variant with non-finite values); larger buckets of a batchable model are checked on batches
// that repeat those rows between distractor rows, against the reference's rows.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "ir/graph.h"
#include "ops/interpreter.h"
#include "runtime/check/differential.h"
#include "runtime/engine.h"
#include "server/model/model_builder.h"
#include "server/model/model_config.h"
#include "server/model/warmup_samples.h"

namespace kiln::server {

// The warm-up feed's ranges: the config's, plus what the graph's use of its inputs says
// (table indices within their table, masks 0/1: runtime/check/input_hints.h); the config's
// per-input ranges win.
check::InputRanges RangesOf(const WarmupConfig& w, const Graph& graph);

// The tolerance one comparison of the check uses: an int8 model's quantization step, and
// every float output's own scale (differential.h).
check::Tolerance ToleranceFor(const Graph& raw, const ref::TensorMap& want,
                              const check::Tolerance& base);

// The rows the warm-up check rests on: the smallest bucket's seeded feed and its non-finite
// variant, and the reference's outputs for each, run on first need (a warm engine cache
// never runs the reference).
struct CheckRows {
  int64_t batch = 0;
  std::unique_ptr<Graph> raw;  // the raw graph at `batch`
  ref::TensorMap feed, nonfinite;
  // Rows placed between the checked ones in larger buckets (and int8's calibration feed):
  // made on first use (DistractorOf), since a check of one bucket (a shape built on demand)
  // never reads them.
  ref::TensorMap distractor;
  std::optional<check::InputRanges> distractor_ranges;  // set until the rows are made
  // Every shipped sample set that fits `raw` (at most kMaxCalibrationSets): what int8
  // calibrates on (server/model/calibration.h); empty without samples.
  std::vector<ref::TensorMap> samples;
  bool tileable = false;  // batchable, and every output has the batch as dim 0
  bool ran = false;
  ref::TensorMap want, want_nonfinite;
  bool nonfinite_usable = true;  // the reference accepted the non-finite feed
  std::string nonfinite_refusal;
  // The model's kept results of nodes over its constants (its FoldCache, or a find-only view
  // of it), shared by every reference run of the check; null: computed each run.
  std::shared_ptr<ref::ConstantResults> constants;
};

inline constexpr size_t kMaxCalibrationSets = 64;

absl::StatusOr<CheckRows> MakeCheckRows(const Graph& imported, int64_t batch, bool batchable,
                                        const ModelConfig& config, const WarmupSamples& samples);
// The distractor rows, made on the first call.
absl::StatusOr<const ref::TensorMap*> DistractorOf(CheckRows& rows);
// Runs the reference on the rows' feeds once (later calls return at once).
absl::Status RunReference(CheckRows& rows, LoadTimes& times);

// One comparison of the check: a feed and the reference's answer to it. `nonfinite`: the feed
// holds NaN/inf, and a difference no pass explains is reported rather than fatal.
struct CheckCase {
  ref::TensorMap feed, want;
  bool nonfinite = false;
  // 0: every row is compared. Else the feed alternates blocks of this many checked rows with
  // as many distractor rows (no reference for them): a kernel that mixed rows would corrupt
  // the checked ones.
  int64_t checked_block = 0;
};

// How many of `rows` rows have (r mod 2 * block) < block.
int64_t CheckedCount(int64_t rows, int64_t block);

// Runs `engine` on `feed` and compares with `want` (the raw graph's outputs), on the checked
// rows only when `checked_block` > 0.
absl::StatusOr<check::Divergence> CheckEngine(runtime::Engine& engine, const ref::TensorMap& feed,
                                              const ref::TensorMap& want,
                                              const check::Tolerance& tol,
                                              int64_t checked_block = 0);

// The check's comparisons for one bucket. The smallest bucket: the rows themselves (finite,
// then non-finite). A larger one: batches repeating those rows when the model allows it,
// else its own random feed against a full reference run.
absl::StatusOr<std::vector<CheckCase>> CasesFor(CheckRows& rows, const Graph& raw, int64_t batch,
                                                const ModelConfig& config, LoadTimes& times);

// The feed a cached entry of this bucket was verified on (its stored outputs answer it),
// without running the reference: the rows, or batches repeating them, or the bucket's own.
// (`*block`: the case's checked_block.)
absl::StatusOr<ref::TensorMap> CachedFeedFor(CheckRows& rows, const Graph& raw, int64_t batch,
                                             const ModelConfig& config, int64_t* block);

}  // namespace kiln::server

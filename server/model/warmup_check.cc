#include "server/model/warmup_check.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>

#include "base/elapsed.h"
#include "base/stop.h"
#include "compiler/shape/infer.h"

namespace kiln::server {
namespace {

using Clock = std::chrono::steady_clock;

bool OutputsHaveRows(const Graph& raw, int64_t batch) {
  for (const Value* v : raw.outputs) {
    if (!v->shape || v->shape->empty() || !(*v->shape)[0].known() ||
        (*v->shape)[0].value != batch || v->dtype == DType::kString) {
      return false;
    }
  }
  return true;
}

// Rows r of every tensor with (r mod 2 * block) < block.
ref::TensorMap CheckedRows(const ref::TensorMap& all, int64_t block) {
  ref::TensorMap out;
  for (const auto& [name, t] : all) {
    const int64_t rows = t.dim(0), keep = CheckedCount(rows, block);
    std::vector<int64_t> shape = t.shape();
    shape[0] = keep;
    Tensor k(t.dtype(), shape);
    const size_t row_bytes = rows > 0 ? t.nbytes() / rows : 0;
    int64_t j = 0;
    for (int64_t r = 0; r < rows; ++r) {
      if (r % (2 * block) >= block) continue;
      std::memcpy(static_cast<char*>(k.raw_mutable()) + j++ * row_bytes,
                  static_cast<const char*>(t.raw()) + r * row_bytes, row_bytes);
    }
    out[name] = std::move(k);
  }
  return out;
}

}  // namespace

// The warm-up feed's ranges: the config's, plus what the graph's use of its inputs says
// (table indices within their table, masks 0/1: runtime/check/input_hints.h); the config's
// per-input ranges win.
check::InputRanges RangesOf(const WarmupConfig& w, const Graph& graph) {
  check::InputRanges r;
  r.seed = w.seed;
  r.float_lo = w.float_lo;
  r.float_hi = w.float_hi;
  r.int_lo = w.int_lo;
  r.int_hi = w.int_hi;
  r.per_input = w.input_ranges;
  return check::WithInputHints(graph, std::move(r));
}

// The tolerance one comparison of the check uses: an int8 model's quantization step, and
// every float output's own scale (differential.h).
check::Tolerance ToleranceFor(const Graph& raw, const ref::TensorMap& want,
                              const check::Tolerance& base) {
  return check::ScaledToOutputs(want, check::ForQuantizedGraph(raw, want, base));
}
absl::StatusOr<CheckRows> MakeCheckRows(const Graph& imported, int64_t batch, bool batchable,
                                        const ModelConfig& config, const WarmupSamples& samples) {
  CheckRows rows;
  rows.batch = batch;
  rows.raw = imported.Clone();
  RETURN_IF_ERROR(shape::Specialize(*rows.raw, batch));
  // Shipped sample inputs first (warmup_samples.h), when one set fits the shapes.
  rows.samples = SampleFeeds(samples, *rows.raw, batchable, kMaxCalibrationSets);
  if (!rows.samples.empty()) {
    rows.feed = rows.samples.front();
  } else {
    ASSIGN_OR_RETURN(rows.feed, check::RandomInputs(*rows.raw, RangesOf(config.warmup, *rows.raw)));
  }
  rows.nonfinite = check::WithNonFiniteValues(rows.feed, config.warmup.seed);
  check::InputRanges other = RangesOf(config.warmup, *rows.raw);
  other.seed += 1;
  rows.distractor_ranges = other;
  rows.tileable = batchable && OutputsHaveRows(*rows.raw, batch);
  return rows;
}

absl::StatusOr<const ref::TensorMap*> DistractorOf(CheckRows& rows) {
  if (rows.distractor_ranges) {
    ASSIGN_OR_RETURN(rows.distractor, check::RandomInputs(*rows.raw, *rows.distractor_ranges));
    rows.distractor_ranges.reset();
  }
  return &rows.distractor;
}

absl::Status RunReference(CheckRows& rows, LoadTimes& times) {
  if (rows.ran) return absl::OkStatus();
  const Clock::time_point t0 = Clock::now();
  if (rows.want.empty()) {  // int8's calibration may have run it (calibration.h)
    ASSIGN_OR_RETURN(rows.want, ref::Run(*rows.raw, rows.feed, rows.constants.get()));
  }
  absl::StatusOr<ref::TensorMap> nf = ref::Run(*rows.raw, rows.nonfinite, rows.constants.get());
  if (!nf.ok() && !IsStopError(nf.status())) {
    rows.nonfinite_usable = false;
    rows.nonfinite_refusal = std::string(nf.status().message());
  } else {
    ASSIGN_OR_RETURN(rows.want_nonfinite, std::move(nf));
  }
  rows.ran = true;
  times.reference_ms += MsSince(t0);
  return absl::OkStatus();
}

// How many of `rows` rows have (r mod 2 * block) < block.
int64_t CheckedCount(int64_t rows, int64_t block) {
  return (rows / (2 * block)) * block + std::min(block, rows % (2 * block));
}

// Runs `engine` on `feed` and compares with `want` (the raw graph's outputs), on the checked
// rows only when `checked_block` > 0.
absl::StatusOr<check::Divergence> CheckEngine(runtime::Engine& engine, const ref::TensorMap& feed,
                                              const ref::TensorMap& want,
                                              const check::Tolerance& tol, int64_t checked_block) {
  std::vector<Tensor> in, out;
  for (const runtime::TensorSpec& s : engine.inputs()) in.push_back(feed.at(s.name));
  RETURN_IF_ERROR(engine.Run(in, out));
  ref::TensorMap got;
  for (size_t i = 0; i < out.size(); ++i) got.emplace(engine.outputs()[i].name, out[i]);
  if (checked_block > 0) got = CheckedRows(got, checked_block);
  return check::CompareOutputs(want, got, tol);
}

absl::StatusOr<std::vector<CheckCase>> CasesFor(CheckRows& rows, const Graph& raw, int64_t batch,
                                                const ModelConfig& config, LoadTimes& times) {
  RETURN_IF_ERROR(RunReference(rows, times));
  std::vector<CheckCase> cases;
  if (batch == rows.batch) {
    cases.push_back({rows.feed, rows.want, false});
    if (rows.nonfinite_usable) cases.push_back({rows.nonfinite, rows.want_nonfinite, true});
    return cases;
  }
  if (rows.tileable) {
    // The non-finite rows are checked at the smallest bucket only: their exact paths are
    // the same kernels at every batch, and building them costs time at each.
    CheckCase c;
    ASSIGN_OR_RETURN(const ref::TensorMap* distractor, DistractorOf(rows));
    ASSIGN_OR_RETURN(c.feed, check::TileRows({&rows.feed, distractor}, batch));
    c.checked_block = rows.batch;
    ASSIGN_OR_RETURN(c.want, check::TileRows({&rows.want}, CheckedCount(batch, rows.batch)));
    cases.push_back(std::move(c));
    return cases;
  }
  CheckCase own;
  const Clock::time_point t0 = Clock::now();
  ASSIGN_OR_RETURN(own.feed, check::RandomInputs(raw, RangesOf(config.warmup, raw)));
  ASSIGN_OR_RETURN(own.want, ref::Run(raw, own.feed, rows.constants.get()));
  times.reference_ms += MsSince(t0);
  cases.push_back(std::move(own));
  return cases;
}

absl::StatusOr<ref::TensorMap> CachedFeedFor(CheckRows& rows, const Graph& raw, int64_t batch,
                                             const ModelConfig& config, int64_t* block) {
  *block = 0;
  if (batch == rows.batch) return rows.feed;
  if (rows.tileable) {
    *block = rows.batch;
    ASSIGN_OR_RETURN(const ref::TensorMap* distractor, DistractorOf(rows));
    return check::TileRows({&rows.feed, distractor}, batch);
  }
  return check::RandomInputs(raw, RangesOf(config.warmup, raw));
}

}  // namespace kiln::server

#include "server/model/last_position_proof.h"

#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "compiler/passes/inline_constant_if.h"
#include "compiler/shape/infer.h"
#include "ops/interpreter.h"
#include "runtime/check/differential.h"
#include "server/model/padding_proof.h"
#include "server/model/warmup_check.h"

namespace kiln::server {
namespace {

// Position `at` along axis 1 of `t` ([rows, positions, ...]), as a one-position tensor.
Tensor PositionOf(const Tensor& t, int64_t at) {
  std::vector<int64_t> shape = t.shape();
  const int64_t positions = shape[1];
  shape[1] = 1;
  Tensor out(t.dtype(), shape);
  const size_t run = static_cast<size_t>(out.nbytes() / static_cast<size_t>(shape[0]));
  for (int64_t r = 0; r < shape[0]; ++r) {
    std::memcpy(static_cast<char*>(out.raw_mutable()) + r * run,
                static_cast<const char*>(t.raw()) + (r * positions + at) * run, run);
  }
  return out;
}

// Runs the model and the cut graph on `feed`; the cut logits must be the model's at
// position `at` (from the end when negative), every other output the same. Gives the
// logits' positions.
absl::StatusOr<int64_t> ProveOn(const Graph& whole, const Graph& last, const std::string& logits,
                                const ref::TensorMap& feed, int64_t at,
                                const WarmupConfig& warmup) {
  ASSIGN_OR_RETURN(ref::TensorMap want, ref::Run(whole, feed));
  ASSIGN_OR_RETURN(ref::TensorMap got, ref::Run(last, feed));
  auto it = want.find(logits);
  if (it == want.end() || it->second.rank() < 2) {
    return absl::InternalError(absl::StrCat("the reference gave no logits '", logits, "'"));
  }
  const int64_t positions = it->second.dim(1);
  it->second = PositionOf(it->second, at < 0 ? positions + at : at);
  const check::Divergence d = check::CompareOutputs(
      want, got, check::ScaledToOutputs(want, check::Tolerance{warmup.rtol, warmup.atol, {}}));
  if (!d.ok) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the cut graph differs from the model at ", at < 0 ? "its last position" : "position ",
        at < 0 ? "" : std::to_string(at), " (", d.message, ")"));
  }
  return positions;
}

// The feed with the last `padding` new positions of every row's `mask` set to 0.
absl::Status PadTheEnd(ref::TensorMap& feed, const std::string& mask, int64_t padding) {
  auto it = feed.find(mask);
  if (it == feed.end() || it->second.rank() != 2) {
    return absl::InternalError(absl::StrCat("the feed has no rank-2 mask '", mask, "'"));
  }
  Tensor padded = it->second.Clone();
  const int64_t width = padded.dim(1);
  for (int64_t r = 0; r < padded.dim(0); ++r) {
    for (int64_t k = width - padding; k < width; ++k) padded.SetDouble(r * width + k, 0.0);
  }
  it->second = std::move(padded);
  return absl::OkStatus();
}

absl::Status Prove(const Graph& model, const Graph& cut, const std::string& logits,
                   const DimValues& probe, const WarmupConfig& warmup, const std::string& mask) {
  std::unique_ptr<Graph> whole = model.Clone(), last = cut.Clone();
  RETURN_IF_ERROR(shape::Specialize(*whole, 1, probe));
  RETURN_IF_ERROR(shape::Specialize(*last, 1, probe));
  const check::InputRanges ranges = RangesOf(warmup, *whole);
  ASSIGN_OR_RETURN(ref::TensorMap feed, check::RandomInputs(*whole, ranges));
  SetMasksToOnes(ranges, feed);  // every position attends: no row is all masked
  ASSIGN_OR_RETURN(const int64_t positions, ProveOn(*whole, *last, logits, feed, -1, warmup));
  if (mask.empty()) return absl::OkStatus();
  if (positions < 2) {
    return absl::FailedPreconditionError("a chunk of one position has no padding to prove");
  }
  // A chunk whose second half is padding: the cut keeps the last real position (neither the
  // first nor the last of the chunk when it has 4 or more), not the padding after it.
  const int64_t padding = positions / 2;
  RETURN_IF_ERROR(PadTheEnd(feed, mask, padding));
  return ProveOn(*whole, *last, logits, feed, positions - padding - 1, warmup).status();
}

absl::StatusOr<LastPositionGraph> CutAndProve(const Graph& model, const std::string& logits,
                                              const DimValues& probe, const WarmupConfig& warmup,
                                              const std::string& mask) {
  LastPositionGraph out;
  out.graph = model.Clone();
  RETURN_IF_ERROR(shape::InferShapes(*out.graph));
  RETURN_IF_ERROR(passes::InlineConstantIf(*out.graph).status());
  ASSIGN_OR_RETURN(out.cut, shape::CutToLastPosition(*out.graph, logits, 1, mask));
  RETURN_IF_ERROR(Prove(model, *out.graph, logits, probe, warmup, mask));
  return out;
}

}  // namespace

absl::StatusOr<LastPositionGraph> CutToLastPositionProven(const Graph& model,
                                                          const std::string& logits,
                                                          const DimValues& probe,
                                                          const WarmupConfig& warmup,
                                                          const std::string& mask) {
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<LastPositionGraph> out = CutAndProve(model, logits, probe, warmup, mask);
  std::string refused;
  if (!out.ok() && !mask.empty()) {
    refused = std::string(out.status().message());
    out = CutAndProve(model, logits, probe, warmup, "");
  }
  if (!out.ok()) return out.status();
  out->by_mask_refused = std::move(refused);
  out->prove_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace kiln::server

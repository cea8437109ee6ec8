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

// The last position along axis 1 of `t` ([rows, positions, ...]).
Tensor LastPosition(const Tensor& t) {
  std::vector<int64_t> shape = t.shape();
  const int64_t positions = shape[1];
  shape[1] = 1;
  Tensor out(t.dtype(), shape);
  const size_t run = static_cast<size_t>(out.nbytes() / static_cast<size_t>(shape[0]));
  for (int64_t r = 0; r < shape[0]; ++r) {
    std::memcpy(static_cast<char*>(out.raw_mutable()) + r * run,
                static_cast<const char*>(t.raw()) + ((r + 1) * positions - 1) * run, run);
  }
  return out;
}

absl::Status Prove(const Graph& model, const Graph& cut, const std::string& logits,
                   const DimValues& probe, const WarmupConfig& warmup) {
  std::unique_ptr<Graph> whole = model.Clone(), last = cut.Clone();
  RETURN_IF_ERROR(shape::Specialize(*whole, 1, probe));
  RETURN_IF_ERROR(shape::Specialize(*last, 1, probe));
  const check::InputRanges ranges = RangesOf(warmup, *whole);
  ASSIGN_OR_RETURN(ref::TensorMap feed, check::RandomInputs(*whole, ranges));
  SetMasksToOnes(ranges, feed);  // every position attends: no row is all masked
  ASSIGN_OR_RETURN(ref::TensorMap want, ref::Run(*whole, feed));
  ASSIGN_OR_RETURN(ref::TensorMap got, ref::Run(*last, feed));
  auto it = want.find(logits);
  if (it == want.end() || it->second.rank() < 2) {
    return absl::InternalError(absl::StrCat("the reference gave no logits '", logits, "'"));
  }
  it->second = LastPosition(it->second);
  const check::Divergence d = check::CompareOutputs(
      want, got, check::ScaledToOutputs(want, check::Tolerance{warmup.rtol, warmup.atol, {}}));
  if (!d.ok) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the cut graph differs from the model at its last position (", d.message, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LastPositionGraph> CutToLastPositionProven(const Graph& model,
                                                          const std::string& logits,
                                                          const DimValues& probe,
                                                          const WarmupConfig& warmup) {
  const auto t0 = std::chrono::steady_clock::now();
  LastPositionGraph out;
  out.graph = model.Clone();
  RETURN_IF_ERROR(shape::InferShapes(*out.graph));
  RETURN_IF_ERROR(passes::InlineConstantIf(*out.graph).status());
  ASSIGN_OR_RETURN(out.cut, shape::CutToLastPosition(*out.graph, logits, 1));
  RETURN_IF_ERROR(Prove(model, *out.graph, logits, probe, warmup));
  out.prove_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace kiln::server

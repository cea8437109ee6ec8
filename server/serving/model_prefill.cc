// ModelVersion::BuildLastPositionEngines: a decoder's prefill steps on engines that compute
// the logits of a chunk's last position only (declared in server/serving/model_registry.h).
// A prefill chunk samples one token, from its last position, yet the model projects every
// position onto the vocabulary; at the test decoders' sizes that projection is a quarter of
// a chunk's time.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "server/model/last_position_proof.h"
#include "server/serving/model_registry.h"

namespace kiln::server {

void ModelVersion::DropLastPositionEngines(const std::string& why) {
  last_position_ = why;
  if (last_shapes_) {
    last_shapes_->Stop();
    last_shapes_.reset();
  }
  spdlog::info("model {} version {}: prefill computes every position's logits: {}", name_, version_,
               why);
}

void ModelVersion::BuildLastPositionEngines(const generate::DecoderContract& contract,
                                            int64_t chunk) {
  const auto t0 = std::chrono::steady_clock::now();
  if (config_.generation.prefill_logits == "all") {
    return DropLastPositionEngines("generation.prefill_logits is all");
  }
  if (chunk < 2) return DropLastPositionEngines("a prefill chunk of one position is a decode step");
  if (!graph_ || !built_.padding) return DropLastPositionEngines("no shape classes to build at");
  const ModelSignature& sig = built_.signature;
  // The proof's sizes: a few positions of each (within their ranges), batch 1.
  DimValues probe = sig.default_dims;
  const auto past = sig.dim_ranges.at(contract.past_symbol);
  const auto seq = sig.dim_ranges.at(contract.sequence_symbol);
  probe[contract.past_symbol] = std::clamp<int64_t>(3, past.first, past.second);
  probe[contract.sequence_symbol] = std::clamp<int64_t>(4, seq.first, seq.second);
  // By the mask where the decoder has one: a short last chunk then runs on these engines too.
  const std::string mask = contract.has_mask() ? sig.inputs[contract.attention_mask].name : "";
  absl::StatusOr<LastPositionGraph> cut = CutToLastPositionProven(
      *graph_, sig.outputs[contract.logits].name, probe, config_.warmup, mask);
  if (!cut.ok()) return DropLastPositionEngines(std::string(cut.status().message()));
  last_by_mask_ = cut->cut.by_mask;
  last_graph_ = std::shared_ptr<const Graph>(std::move(cut->graph));
  const std::vector<int64_t>& pasts = built_.padding->classes.at(contract.past_symbol);
  auto build = [this](const DimValues& dims, int64_t bucket, bool check) {
    return BuildShapeEngines(*last_graph_, config_, built_, dims, bucket, check);
  };
  absl::StatusOr<std::unique_ptr<ShapeEngines>> shapes =
      ShapeEngines::Create(policy_, pasts.size(), build, config_.instances);
  if (!shapes.ok()) return DropLastPositionEngines(std::string(shapes.status().message()));
  last_shapes_ = std::move(*shapes);
  // Prefill runs one sequence per step: the smallest bucket. The check proves the ends of
  // the past's range, as for the shape classes.
  for (size_t i = 0; i < pasts.size(); ++i) {
    DimValues dims = sig.default_dims;
    dims[contract.past_symbol] = pasts[i];
    dims[contract.sequence_symbol] = chunk;
    const bool check = config_.warmup.enabled && (i == 0 || i + 1 == pasts.size());
    const absl::Status s = last_shapes_->Prebuild(dims, built_.buckets.front(), check);
    if (!s.ok()) {
      return DropLastPositionEngines(
          absl::StrCat("the engine at ", ShapeKey(dims), ": ", s.message()));
    }
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const std::string which =
      last_by_mask_ ? "the last real position (by the mask: short chunks padded to it)"
      : mask.empty()
          ? "the last position only"
          : absl::StrCat("the last position only (not by the mask: ", cut->by_mask_refused, ")");
  last_position_ =
      absl::StrCat(cut->cut.nodes, " ops (", cut->cut.products, " products) compute ", which,
                   "; proven in ", static_cast<int64_t>(cut->prove_ms), " ms; ", pasts.size(),
                   " engines at ", chunk, " positions in ", static_cast<int64_t>(ms), " ms");
  spdlog::info("model {} version {}: prefill chunks: {}", name_, version_, last_position_);
}

}  // namespace kiln::server

// Whether a dynamic model may be served by padding (server/model/padding.h), proven on the model
// itself: the reference interpreter runs it at small sizes and at those sizes padded with
// zeros, and the outputs cut back to the small sizes must match the unpadded run.
//
// What the proof takes as given: an unpadded request is one whose mask inputs (the inputs the
// warm-up feed draws from {0, 1}, runtime/check/input_hints.h) are all ones; the padding
// appended to every input dim that carries a padded symbol is zero (an input mask's zero
// masks it). Every output dim must either not change with the padded sizes or be one of them
// (the request's part of it is then its prefix); an output like a decoder's `present`, whose
// dim is `past + 1`, cannot be cut back and refuses padding (the model keeps one engine set
// per exact shape).
#pragma once

#include <functional>
#include <string>

#include "base/status.h"
#include "ir/graph.h"
#include "runtime/check/differential.h"
#include "server/model/model_config.h"
#include "server/model/padding.h"

namespace kiln::server {

struct PaddingPlan {
  ShapeClasses classes;
  DimSymbols inputs, outputs;  // per model input / output, per dim: its padded symbol
  // "sequence: 16 24 32 48 64 96 128 192 256 384 512" (the log line and GetModel).
  std::string ToString() const;
};

// The largest range end served by shape classes: every class's engines are built (and run
// once) at load, and a class of 4096 positions at batch 8 (the default range of a model with no
// position table) costs a BERT-base-size model gigabytes and minutes. A longer range keeps
// per-shape engines unless the config narrows it.
inline constexpr int64_t kMaxClassSize = 1024;

// The warm-up feed's ranges for a graph at concrete sizes (the server's RangesOf).
using RangesFor = std::function<check::InputRanges(const Graph&)>;

// Every input the ranges draw from {0, 1} (a mask) set to all ones in `feed`: the proofs run
// an unpadded request, which attends everywhere.
void SetMasksToOnes(const check::InputRanges& ranges, ref::TensorMap& feed);

// `model`: imported, with the config's input_shapes applied and the dynamic dims still open.
// `config`: finalized, every dynamic symbol's profile resolved (dynamic_dims,
// dynamic_dim_ranges). `inputs`: the signature's dim_symbols. The plan when padding is
// sound, with classes over each symbol's range (coarser when the classes of all symbols
// together would exceed `max_classes` combinations); FAILED_PRECONDITION saying why not
// otherwise (a padded range ending above kMaxClassSize included).
absl::StatusOr<PaddingPlan> ProvePadding(const Graph& model, const ModelConfig& config,
                                         const DimSymbols& inputs, const RangesFor& ranges_for,
                                         size_t max_classes);

}  // namespace kiln::server

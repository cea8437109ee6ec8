// Profiles for a model's symbolic input dims, so a model exported with dynamic axes (a text
// model's [batch, sequence]) loads with no config, as ONNX Runtime and Triton serve it.
//
// Every symbolic input dim other than dim 0 (the batch, or a non-batchable model's leading
// dim, which stays an error as before) that input_shapes leaves open gets a profile:
//   - a range [min, max] of the sizes served: the config's (`dynamic_dims: {sequence:
//     [1, 512]}`) where given, else the sizes the model's own shapes admit. Those are found by
//     shape inference at probe sizes (batch 1, the other dims at their typical sizes): a
//     position-embedding table sliced or gathered by the sequence breaks the broadcast with
//     the token embeddings above its rows (BERT: 512), so the largest size that infers is the
//     max. The search assumes the sizes that infer are one interval; it looks in
//     [1, kDefaultMaxDim], so a model with no such table gets kDefaultMaxDim.
//   - a typical size, built and warm-up checked at: the config's, else kDefaultTypicalDim
//     (128: a typical text request, and cheap to check) clamped into the range.
// Requests at other sizes inside the range run on per-shape engines (shape_engines.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "ir/graph.h"
#include "server/model/model_config.h"

namespace kiln::server {

inline constexpr int64_t kDefaultTypicalDim = 128;
inline constexpr int64_t kDefaultMaxDim = 4096;

// True when shape inference accepts `model` (input_shapes applied) at batch 1 with `dims`.
bool ShapesInferAt(const Graph& model, const std::map<std::string, int64_t>& dims);

// The symbolic dims of `model` (input_shapes applied) a profile can serve: dims past 0 with
// a name, in input order, each once.
std::vector<std::string> OpenDims(const Graph& model);

// Fills config.dynamic_dims (typical sizes) and config.dynamic_dim_ranges for every open
// symbolic dim, keeping what the config gives. `model` has the config's input_shapes applied.
// `preferred`: typical sizes to use where the config gives none (a shipped sample's), kept
// when the model's shapes infer there.
// INVALID_ARGUMENT when the model's shapes do not infer at a dim's typical size (naming the
// dim and the config key) or the config's typical size is outside the model's range.
absl::Status ResolveDimProfiles(const Graph& model, ModelConfig& config,
                                const std::map<std::string, int64_t>& preferred = {});

}  // namespace kiln::server

// Inputs fixed when a model loads: the config's `bind_inputs`, and a merged decoder's
// `use_cache_branch`. A bound input becomes a constant of the graph (no longer an input of
// its signature), so the compiler folds what depends on it: a merged decoder (one ONNX file
// for the first step and the steps with a cache, `If(use_cache_branch)` around both) is served
// as its cache branch, which also computes the first step (the cache then holds nothing the
// attention mask lets it see), and the If's branch is inlined (inline_constant_if).
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "ir/graph.h"
#include "server/model/model_config.h"

namespace kiln::server {

inline constexpr char kUseCacheBranch[] = "use_cache_branch";

// Binds the inputs `config` names, and `use_cache_branch` (a bool input of one element) to
// true when generation is not off and the config does not name it. One line per bound input
// ("use_cache_branch = true (a merged decoder: its cache branch)"). INVALID_ARGUMENT naming the
// input when the model has no such input, its dims are not all sizes, the value count is
// neither 1 nor its element count, or a value does not fit its type (3.5 for an integer).
absl::StatusOr<std::vector<std::string>> BindInputs(Graph& graph, const ModelConfig& config);

// What BindInputs depends on besides the model file, for the engine cache key.
std::string BoundInputsKey(const ModelConfig& config);

}  // namespace kiln::server

// A model's dims as BuildModel binds them (internal to server/): input_shapes and the
// dynamic dims' profiles applied, the dynamic dims marked in the signature, and whether the
// model may be served padded to shape classes (server/model/padding_proof.h).
#pragma once

#include "base/status.h"
#include "ir/graph.h"
#include "server/common/model_signature.h"
#include "server/model/model_builder.h"
#include "server/model/model_config.h"
#include "server/model/padding.h"
#include "server/model/warmup_samples.h"

namespace kiln::server {

// input_shapes first, then the dynamic_dims symbols at their warm-up sizes. `symbols` gets,
// per input and dim, the dynamic symbol bound there ("" elsewhere): a dim input_shapes fixed
// is not dynamic, and a dynamic_dims name no open dim carries is a config error.
// The symbolic dims input_shapes leaves open get their profiles first (`config` takes them:
// dim_profiles.h), so every one of them is dynamic.
absl::Status BindConfigDims(Graph& g, ModelConfig& config, const WarmupSamples& samples,
                            DimSymbols& symbols);

// Shows the dynamic dims as -1 in the signature (inputs, and every output dim the model's
// shapes, inferred with the dynamic dims left symbolic, do not fix), and records where they
// are for request validation and routing.
void MarkDynamicDims(const Graph& model, const ModelConfig& config, DimSymbols symbols,
                     ModelSignature& sig);

// Proves whether the dynamic model `m` may be served padded to shape classes and records
// the plan (or why not) in `m`. `config` has every dynamic symbol's profile.
void ProveClasses(const Graph& model, const ModelConfig& config, BuiltModel& m);

}  // namespace kiln::server

// The precision side of a model's build (`precision: {mode: auto}`, model_config.h): the
// warm-up check's tolerance while products are lowered, the fallback to float32 when the
// lowered engine exceeds the budget, and what the served engines compute in.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "compiler/pipeline.h"
#include "runtime/check/compare.h"
#include "runtime/engine.h"
#include "server/model_builder.h"
#include "server/model_config.h"

namespace kiln::server {

// The config's tolerance, or the precision budget while the compile lowers products.
check::Tolerance ToleranceOf(const ModelConfig& config, const PipelineOptions& pipeline);

// The engine cache key's part for precision: "float32", or the lowered precision with the
// budget it was verified within (a tighter budget must not take a looser one's entry).
std::string PrecisionKey(const ModelConfig& config, const PipelineOptions& pipeline);

// A lowered engine failed the budget on `batch` with `d`: this and every later bucket
// compile in float32, and `check` says why (the errors measured go to the message, not to
// the summary of the served engines).
void FallBackToFloat32(int64_t batch, const check::Divergence& d, PipelineOptions& pipeline,
                       CheckSummary& check);

// What the engines compute in, from the engines themselves: "float32", "bf16", or a mix
// when a bucket fell back after another passed.
std::string PrecisionOf(const std::map<int64_t, std::vector<std::unique_ptr<runtime::Engine>>>& engines);

}  // namespace kiln::server

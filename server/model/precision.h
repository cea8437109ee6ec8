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
#include "server/model/model_builder.h"
#include "server/model/model_config.h"

namespace kiln::server {

// The config's tolerance, or while the compile lowers products the precision budget's
// element-wise guard: |engine - reference| <= max_abs_error + 10 * max_rel_error * (the
// output's RMS + |reference|), which only a broken kernel exceeds.
check::Tolerance ToleranceOf(const ModelConfig& config, const PipelineOptions& pipeline);

// The budget proper, for a lowered engine whose elements passed the guard: every float
// output's relative error ||engine - reference|| / ||reference|| within max_rel_error
// (`d` fails with the figure otherwise).
void WithinBudget(const ModelConfig& config, const PipelineOptions& pipeline, check::Divergence& d);

// The engine cache key's part for precision: "float32", or the lowered precision with the
// budget it was verified within (a tighter budget must not take a looser one's entry).
std::string PrecisionKey(const ModelConfig& config, const PipelineOptions& pipeline);

// The first precision auto tries on `device`: int8 where the config allows it and the
// device has integer kernels (fuse_qdq runs there), else the device's lower float precision
// (bf16), else "" (float32 only).
std::string LowestPrecisionOn(const std::string& device, const PrecisionConfig& precision);

// The ladder's next step up from `precision`: int8 or int8-mixed -> bf16 (float32 where
// `device` has no bf16) -> bf16-mixed (attention's score projections in float32) -> float32
// (int8 -> int8-mixed is FallBack's, from a measured error).
std::string NextPrecision(const std::string& precision, const std::string& device);

// Appends `note` to check.precision_message ("; " between notes): the ladder's steps, the
// calibration's source, the speed verdicts.
void AddPrecisionNote(CheckSummary& check, const std::string& note);

// This and every later bucket compile one step up the ladder, `check` saying `why`.
void StepUp(const std::string& device, const std::string& why, PipelineOptions& pipeline,
            CheckSummary& check);

// int8-mixed's share of the estimated quantization noise to keep quantized after int8
// measured `measured` against `budget`: noise powers add, so the error falls about as the
// square root of the share; the margin allows for the estimate (quantization_noise.h). 0:
// int8-mixed would keep too little quantized to be worth a compile.
inline constexpr double kInt8MixedMargin = 0.4, kMinInt8NoiseKept = 1e-3;
double Int8NoiseToKeep(double measured, double budget);

// A lowered engine failed the budget on `batch` with `d`: int8 tries int8-mixed once (the
// products whose rounding the outputs feel most left float, Int8NoiseToKeep), every other
// precision StepUps, saying so (the errors measured go to the message, not to the summary of
// the served engines).
void FallBack(int64_t batch, const check::Divergence& d, const ModelConfig& config,
              PipelineOptions& pipeline, CheckSummary& check);

// What one bucket's engine computes in: the precision its compile lowered to (`compiled_at`,
// after any fallback), or "float32" when the engine has no product in it (no bf16 product
// for bf16, no integer one for int8).
std::string BucketPrecision(const runtime::Engine& engine, const std::string& compiled_at);

// What the model's engines compute in, from each bucket's BucketPrecision: that precision
// when every bucket agrees ("float32", "int8", "bf16", "bf16-mixed"), else each one with its
// buckets, lowest first ("bf16 (batch 1, 2), bf16-mixed (batch 8)"), which a shape's engines read
// as float32.
std::string PrecisionOf(const std::map<int64_t, std::string>& by_bucket);

}  // namespace kiln::server

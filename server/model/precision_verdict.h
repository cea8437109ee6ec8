// The precision ladder's verdict (`precision: {mode: auto}`, precision.h) kept in the engine
// cache beside the engines. A reload or a warm restart then starts where the ladder settled,
// and that precision's engines come from the cache, instead of calibrating, compiling and
// checking every step the ladder rejected and timing the rivals again (on a shared host the
// timings could also settle elsewhere each time). The record is keyed like the first
// bucket's engine at the ladder's start, plus what decides the ladder (the start precision,
// the budget, `prefer`): a changed budget, config or model climbs the ladder afresh.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "compiler/pipeline.h"
#include "server/model/engine_cache.h"
#include "server/model/model_builder.h"
#include "server/model/model_config.h"

namespace kiln::server {

struct PrecisionVerdict {
  std::string precision;         // what the later buckets compiled at
  double int8_noise_kept = 1.0;  // int8-mixed's share (PipelineOptions::int8_noise_kept)
  std::string message;           // the ladder's precision_message
  // int8's calibration (null unless the ladder calibrated): a warm start builds no int8
  // engine itself, but a shape's engines compiled later (dynamic dims) need the ranges.
  std::shared_ptr<const passes::Calibration> calibration;
};

// `start`: the pipeline at the ladder's first step, before any bucket is built.
EngineCacheKey VerdictKeyFor(const CacheContext& cache, const ModelConfig& config,
                             const PipelineOptions& start, int64_t batch);

// nullopt without a cache, on a miss, or on a record that does not parse.
std::optional<PrecisionVerdict> LookupVerdict(const CacheContext& cache, const EngineCacheKey& key);
void StoreVerdict(const CacheContext& cache, const EngineCacheKey& key, const PrecisionVerdict& v);

}  // namespace kiln::server

// How a bucket's engine is made (internal to server/: model_builder.cc and its engine cache
// prefetch share it): the first instance with its thread choice, and an engine rebuilt from
// an engine cache entry.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "compiler/compile.h"
#include "runtime/engine.h"
#include "server/model/engine_cache.h"
#include "server/model/model_builder.h"
#include "server/model/model_config.h"

namespace kiln::server {

// A bucket's first engine instance. An explicit cpu_threads is taken as given; the default
// (cores divided among instances) may settle on one thread for a small engine, unless
// `tuned` (a cache entry's record of that measurement) already says which.
absl::StatusOr<std::unique_ptr<runtime::Engine>> FirstEngine(
    const ModelConfig& config, const std::string& layout, const CompiledGraph& compiled,
    EngineCacheEntry::Threads tuned = EngineCacheEntry::Threads::kNotTuned);

// The config a shape's engines build from (BuildShapeEngines): `dims` bound, one bucket, the
// checks' verdicts, and the layout, threads and wide runs the model's first engine settled on.
ModelConfig ShapeBuildConfig(const ModelConfig& config, const BuiltModel& base,
                             const std::map<std::string, int64_t>& dims, int64_t bucket,
                             bool check);

// The layout a cache entry's engine is built with: a tuned layout is reused (the measurement
// was made for this model, batch and CPU).
std::string LayoutFor(const EngineCacheEntry& e, const ModelConfig& config);

// A cache entry's engine: its graph imported (the constants view the entry's blobs), memory
// planned, the engine built with `layout`.
absl::Status BuildFromEntry(const EngineCacheEntry& e, const ModelConfig& config,
                            const std::string& layout, CompiledGraph& compiled,
                            std::unique_ptr<runtime::Engine>& engine, LoadTimes& times);

// The smallest bucket, the largest, then the ones between: a layout is tuned for the two
// ends only, and a bucket between them takes the nearer end's choice (geometrically: b2 is
// nearer b1 than b8). Tuning every bucket cost ResNet-50 6.9 s of a 20 s load.
std::vector<int64_t> BuildOrder(const std::vector<int64_t>& buckets);

}  // namespace kiln::server

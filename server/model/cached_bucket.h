// Internal to the model builder: one bucket's compiled graph and engine, and what the engine
// cache adds to building one (model_builder.cc): re-verifying a bucket rebuilt from a cache
// entry, the entry a fresh bucket stores, and the check results an entry carries over.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "compiler/compile.h"
#include "ops/interpreter.h"
#include "runtime/check/differential.h"
#include "runtime/engine.h"
#include "server/model/model_builder.h"

namespace kiln::server {

struct BucketResult {
  CompiledGraph compiled;
  std::unique_ptr<runtime::Engine> engine;
  std::string report_json;
};

// Rebuilds the engine from a cache entry (or takes the one CachePrefetch built from it, when
// with the same layout) and re-verifies it: one run on the seeded warm-up inputs against the
// reference outputs stored with it (the reference run is what a hit saves). Any failure
// means the entry is not used.
absl::StatusOr<BucketResult> FromCache(const EngineCacheEntry& e, const ModelConfig& config,
                                       const PipelineOptions& pipeline, const Graph& raw,
                                       int64_t checked_block, const ref::TensorMap& feed,
                                       const check::Tolerance& tol, LoadTimes& times,
                                       std::optional<PreparedBucket>& prepared);

// The cache entry for a freshly built bucket; nullopt when it could not be re-verified later
// (an output the file format cannot hold).
std::optional<EngineCacheEntry> EntryFor(const BucketResult& r, const CheckSummary& check,
                                         const ModelConfig& config, const ref::TensorMap& want);

// A cached bucket's check outcome into the model's: its errors, the passes it disabled (off
// for the buckets still to build), its message.
void MergeCachedCheck(const EngineCacheEntry& e, PipelineOptions& pipeline, CheckSummary& check);

}  // namespace kiln::server

// Turns an imported graph into servable engines: one compiled graph per batch bucket, one
// engine per (bucket, instance), each checked on warm-up against the reference interpreter
// running the raw graph. A mismatch bisects the pass pipeline, disables the first pass that
// moved the answer (for this model only), rebuilds and re-checks.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"
#include "compiler/ir/graph.h"
#include "compiler/shape/bind_dims.h"
#include "runtime/engine.h"
#include "server/engine_cache.h"
#include "server/model_config.h"
#include "server/model_signature.h"

namespace kiln::server {

struct CheckSummary {
  bool ran = false;
  bool ok = true;
  double max_abs_err = 0.0, max_rel_err = 0.0;
  std::string message;
  std::set<std::string> disabled_passes;  // switched off by the bisection
};

struct BuiltModel {
  ModelSignature signature;
  std::vector<int64_t> buckets;  // the batch sizes engines exist for
  // bucket -> one engine per instance.
  std::map<int64_t, std::vector<std::unique_ptr<runtime::Engine>>> engines;
  std::string report_json;  // the compile report of the largest bucket
  CheckSummary check;
};

// Reports progress ("compiling batch 4") while building; may be empty.
using ProgressFn = std::function<void(const std::string&)>;

// The engine cache for one model file; without a cache every bucket compiles and checks.
struct CacheContext {
  EngineCache* cache = nullptr;
  std::string model_hash;  // ContentHash of the model file's bytes
};

// The cache key of one bucket: everything that decides what CompileGraph and the warm-up
// check produce for it (`pipeline` as it stands before this bucket: the config's disabled
// passes plus those earlier buckets' bisections named).
EngineCacheKey CacheKeyFor(const CacheContext& cache, const ModelConfig& config,
                           const PipelineOptions& pipeline, int64_t batch);

// `config` must be finalized. Its input_shapes are applied to (a copy of) `model` first.
// FAILED_PRECONDITION when the warm-up check still fails after the bisection (the message
// says why); other errors pass through from the compiler/engine.
absl::StatusOr<BuiltModel> BuildModel(const Graph& model, const ModelConfig& config,
                                      const ProgressFn& progress,
                                      const CacheContext& cache = {});

// Inputs of a model by name, dim 0 -1 when batchable (before any engine exists). `imported`
// has the config's input_shapes applied already (BuildModel does that).
absl::StatusOr<ModelSignature> SignatureOf(const Graph& imported, const ModelConfig& config);

// The config's input_shapes as compiler input dims (also part of the engine cache key).
shape::InputDims InputDimsOf(const ModelConfig& config);

}  // namespace kiln::server

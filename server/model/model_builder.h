// Turns an imported graph into servable engines: one compiled graph per batch bucket, one
// engine per (bucket, instance), each checked on warm-up against the reference interpreter
// running the raw graph. A mismatch bisects the pass pipeline, disables the first pass that
// moved the answer (for this model only), rebuilds and re-checks.
//
// The reference runs once per model, not per bucket: on the smallest bucket's seeded random
// feed and on the same feed with non-finite values. A larger bucket of a batchable model
// (whose rows are independent: the batcher relies on that) is checked on a batch that repeats
// those rows, against the reference's rows, so loading costs one small reference run
// whatever the buckets.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "compiler/compile.h"
#include "compiler/shape/bind_dims.h"
#include "ir/graph.h"
#include "runtime/engine.h"
#include "server/common/model_signature.h"
#include "server/model/cache_mask.h"
#include "server/model/engine_cache.h"
#include "server/model/model_config.h"
#include "server/model/padding_proof.h"

namespace kiln::passes {
class FoldCache;
}

namespace kiln::server {

struct CheckSummary {
  bool ran = false;
  bool ok = true;
  double max_abs_err = 0.0, max_rel_err = 0.0;
  double norm_rel_err = 0.0;  // the largest output's ||engine - reference|| / ||reference||
  std::string message;
  std::set<std::string> disabled_passes;  // switched off by the bisection
  // The second feed, with NaN, infinities, -0 and denormals in the float inputs: an engine
  // that computes them differently from the reference (and no pass to blame) still serves,
  // with the difference reported here.
  bool nonfinite_checked = false;
  bool nonfinite_ok = true;
  std::string nonfinite_message;
  // What the engines compute in (server/model/precision.h PrecisionOf: "float32", "bf16",
  // "bf16-mixed", or each bucket's step when they differ) and, when `precision: {mode: auto}`
  // lowered it or tried to, each step the check found over the budget.
  std::string precision = "float32";
  std::string precision_message;
};

// Where a load's time went (milliseconds, all buckets): GetModel and the log report it.
struct LoadTimes {
  double import_ms = 0;     // reading, hashing and importing the model file (the registry)
  double cache_ms = 0;      // reading engine cache entries, importing their graphs, memory plans
  double reference_ms = 0;  // the reference interpreter's runs for the warm-up check
  double compile_ms = 0;    // the pass pipeline and memory plan
  double engine_ms = 0;     // engine builds, layout and thread tuning included
  double tune_ms = 0;       // of which: tuning
  double check_ms = 0;      // engine runs of the check (a cache hit's re-verification too)
  int cache_hits = 0;       // buckets taken from the engine cache
  int built_ahead = 0;      // of which: engines CachePrefetch built beside the import
  double padding_ms = 0;    // proving a dynamic model may be served padded (padding_proof.h)
  double classes_ms = 0;    // building the shape classes' engines (dynamic models)
  std::string ToString() const;
};

struct BuiltModel {
  ModelSignature signature;
  std::vector<int64_t> buckets;  // the batch sizes engines exist for
  // bucket -> one engine per instance.
  std::map<int64_t, std::vector<std::unique_ptr<runtime::Engine>>> engines;
  std::string report_json;  // the compile report of the largest bucket
  CheckSummary check;
  LoadTimes times;
  // Dynamic models served by padding to shape classes (model config shape_classes: auto and
  // the proof held); otherwise `padding_refused` says why not (empty: not asked).
  std::optional<PaddingPlan> padding;
  std::string padding_refused;
  // The inputs fixed at load, one "name = value" line each (server/model/bound_inputs.h).
  std::vector<std::string> bound_inputs;
  // A maskless decoder's added attention mask (server/model/cache_mask.h), or a masked
  // decoder's positions read from its mask (server/model/mask_positions.h); nothing for any
  // other model.
  CacheMaskOutcome cache_mask;
  // The folds of the model's large constants, shared by every later build of its shapes so
  // their engines share one prepacked copy of each weight.
  std::shared_ptr<passes::FoldCache> fold_cache;
  // The int8 calibration the engines were quantized with (null unless int8 was tried); a
  // shape's engines reuse it (their own build has no warm-up rows when unchecked).
  std::shared_ptr<const passes::Calibration> calibration;
  double int8_noise_kept = 1.0;  // int8-mixed's share (PipelineOptions::int8_noise_kept)
};

// At most this many class combinations of a model's dynamic dims (each with an engine per
// batch bucket) are built at load; more makes the ladders coarser, then refuses padding.
inline constexpr size_t kMaxShapeClasses = 32;

// Reports progress ("compiling batch 4") while building; may be empty.
using ProgressFn = std::function<void(const std::string&)>;

class CachePrefetch;

// The engine cache for one model file; without a cache every bucket compiles and checks.
struct CacheContext {
  EngineCache* cache = nullptr;
  std::string model_hash;             // ContentHash of the model file's bytes
  CachePrefetch* prefetch = nullptr;  // engines being built ahead from the cache; may be null
};

// A bucket's engine rebuilt from its cache entry, not yet re-verified.
struct PreparedBucket {
  std::string key;  // EngineCacheKey::ToString
  std::shared_ptr<const EngineCacheEntry> entry;
  std::string layout;  // what the engine was built with
  CompiledGraph compiled;
  std::unique_ptr<runtime::Engine> engine;
  double cache_ms = 0, engine_ms = 0;  // spent on the prefetch's thread
};

// Rebuilds a warm load's engines from the engine cache on a thread of its own while the
// caller imports the model file, so on two cores the engine builds (weight prepacking:
// 0.35-0.45 s per ResNet-50 bucket) overlap the import (0.35-0.6 s) and BuildModel is left
// with the re-verification runs (measured: ResNet-50 warm 3.2 -> 2.2 s to READY). It needs only the
// model's hash and config: it walks the buckets in BuildModel's order with BuildModel's keys (the
// entries' disabled passes carried forward) and layouts (a bucket between the ends takes the nearer
// end's), and stops at the first miss or failure. BuildModel takes a prepared engine only when the
// key and layout are the ones it would build itself, and re-verifies it as any hit; everything else
// is built as without a prefetch. The destructor stops the thread after its current build and joins
// it.
class CachePrefetch {
 public:
  // `config` must be finalized; `cache.cache` must be set.
  CachePrefetch(const CacheContext& cache, const ModelConfig& config);
  ~CachePrefetch();
  CachePrefetch(const CachePrefetch&) = delete;
  CachePrefetch& operator=(const CachePrefetch&) = delete;

  // The bucket at `position` of the build order if its key is `key`, waiting for it while
  // it is being built; nullopt when it was not prepared or under another key (then nothing
  // later is either: the thread is stopped).
  std::optional<PreparedBucket> Take(size_t position, const std::string& key);

 private:
  void Run();
  // One bucket: false when the prefetch must stop there (a miss, or a build that failed).
  bool Prepare(int64_t batch, PipelineOptions& pipeline, std::map<int64_t, std::string>& layouts);

  const CacheContext cache_;
  const ModelConfig config_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::optional<PreparedBucket>> ready_;  // by position; guarded by mu_
  bool finished_ = false;                             // guarded by mu_
  std::atomic<bool> cancel_{false};
  std::thread worker_;
};

// The cache key of one bucket: everything that decides what CompileGraph and the warm-up
// check produce for it (`pipeline` as it stands before this bucket: the config's disabled
// passes plus those earlier buckets' bisections named).
EngineCacheKey CacheKeyFor(const CacheContext& cache, const ModelConfig& config,
                           const PipelineOptions& pipeline, int64_t batch);

// `config` must be finalized. Its input_shapes are applied to (a copy of) `model` first.
// FAILED_PRECONDITION when the warm-up check still fails after the bisection (the message
// says why); other errors pass through from the compiler/engine.
// `fold_cache`: an earlier build's (a shape of the same model), else a new one.
absl::StatusOr<BuiltModel> BuildModel(const Graph& model, const ModelConfig& config,
                                      const ProgressFn& progress, const CacheContext& cache = {},
                                      std::shared_ptr<passes::FoldCache> fold_cache = nullptr);

// The kiln_differential_checks_total outcome of one BuildModel result (its status, and its
// check when it succeeded): "pass", "pass_after_bisect", "pass_finite_only", "fail"
// (FAILED_PRECONDITION: the check failed), or null when no check ran (another error, or the
// check is off).
const char* CheckOutcome(const absl::Status& status, const CheckSummary* check);

// Inputs of a model by name, dim 0 -1 when batchable (before any engine exists). `imported`
// has the config's input_shapes applied already (BuildModel does that).
absl::StatusOr<ModelSignature> SignatureOf(const Graph& imported, const ModelConfig& config);

// The config's input_shapes and dynamic_dims (at their warm-up sizes) as compiler input dims
// (also part of the engine cache key).
shape::InputDims InputDimsOf(const ModelConfig& config);

// A dynamic model's engine for one shape and batch bucket: `dims` (every dynamic_dims symbol)
// bound instead of the warm-up sizes, then compiled and checked against the reference at that
// shape like a bucket at load. It takes the layout, threads and disabled passes the model's
// own engines (`base`) settled on, so neither tuning nor a known bisection is repeated, and
// `base`'s folded weights. `check` false skips the check (a shape class other than those the
// load checks: the range's ends and one inside, server/model/padding.h).
absl::StatusOr<std::unique_ptr<runtime::Engine>> BuildShapeEngine(
    const Graph& model, const ModelConfig& config, const BuiltModel& base,
    const std::map<std::string, int64_t>& dims, int64_t bucket, bool check = true);
// The same, `config.instances` engines of one compile (the first checked; the others take its
// layout and threads), for a shape that runs that many batches at once.
absl::StatusOr<std::vector<std::unique_ptr<runtime::Engine>>> BuildShapeEngines(
    const Graph& model, const ModelConfig& config, const BuiltModel& base,
    const std::map<std::string, int64_t>& dims, int64_t bucket, bool check = true);

}  // namespace kiln::server

#include "server/model_builder.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/heap_scope.h"
#include "base/stop.h"
#include "compiler/compile.h"
#include "compiler/onnx/exporter.h"
#include "compiler/onnx/importer.h"
#include "compiler/plan/memory_plan.h"
#include "compiler/shape/infer.h"
#include "runtime/check/differential.h"
#include "runtime/reference/interpreter.h"
#include "server/dim_profiles.h"
#include "server/engine_factory.h"
#include "server/metrics/kiln_metrics.h"
#include "server/warmup_samples.h"

namespace kiln::server {
namespace {

constexpr int kMaxBisections = 4;

using Clock = std::chrono::steady_clock;
double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}  // each disables one pass; more means something else is wrong

// The warm-up feed's ranges: the config's, plus what the graph's use of its inputs says
// (table indices within their table, masks 0/1: runtime/check/input_hints.h); the config's
// per-input ranges win.
check::InputRanges RangesOf(const WarmupConfig& w, const Graph& graph) {
  check::InputRanges r;
  r.seed = w.seed;
  r.float_lo = w.float_lo;
  r.float_hi = w.float_hi;
  r.int_lo = w.int_lo;
  r.int_hi = w.int_hi;
  r.per_input = w.input_ranges;
  return check::WithInputHints(graph, std::move(r));
}

// The tolerance one comparison of the check uses: an int8 model's quantization step, and
// every float output's own scale (differential.h).
check::Tolerance ToleranceFor(const Graph& raw, const ref::TensorMap& want,
                              const check::Tolerance& base) {
  return check::ScaledToOutputs(want, check::ForQuantizedGraph(raw, want, base));
}

// Runs `engine` on `feed` and compares with `want` (the raw graph's outputs).


struct BucketResult {
  CompiledGraph compiled;
  std::unique_ptr<runtime::Engine> engine;
  std::string report_json;
};

// The rows the warm-up check rests on: the smallest bucket's seeded feed and its non-finite
// variant, and the reference's outputs for each, run on first need (a warm engine cache
// never runs the reference).
struct CheckRows {
  int64_t batch = 0;
  std::unique_ptr<Graph> raw;  // the raw graph at `batch`
  ref::TensorMap feed, nonfinite;
  ref::TensorMap distractor;  // rows placed between the checked ones in larger buckets
  bool tileable = false;  // batchable, and every output has the batch as dim 0
  bool ran = false;
  ref::TensorMap want, want_nonfinite;
  bool nonfinite_usable = true;  // the reference accepted the non-finite feed
  std::string nonfinite_refusal;
};

bool OutputsHaveRows(const Graph& raw, int64_t batch) {
  for (const Value* v : raw.outputs) {
    if (!v->shape || v->shape->empty() || !(*v->shape)[0].known() ||
        (*v->shape)[0].value != batch || v->dtype == DType::kString) {
      return false;
    }
  }
  return true;
}

absl::StatusOr<CheckRows> MakeCheckRows(const Graph& imported, int64_t batch, bool batchable,
                                        const ModelConfig& config, const WarmupSamples& samples) {
  CheckRows rows;
  rows.batch = batch;
  rows.raw = imported.Clone();
  RETURN_IF_ERROR(shape::Specialize(*rows.raw, batch));
  // Shipped sample inputs first (warmup_samples.h), when one set fits the shapes.
  if (std::optional<ref::TensorMap> sample = SampleFeed(samples, *rows.raw, batchable)) {
    rows.feed = std::move(*sample);
  } else {
    ASSIGN_OR_RETURN(rows.feed, check::RandomInputs(*rows.raw, RangesOf(config.warmup, *rows.raw)));
  }
  rows.nonfinite = check::WithNonFiniteValues(rows.feed, config.warmup.seed);
  check::InputRanges other = RangesOf(config.warmup, *rows.raw);
  other.seed += 1;
  ASSIGN_OR_RETURN(rows.distractor, check::RandomInputs(*rows.raw, other));
  rows.tileable = batchable && OutputsHaveRows(*rows.raw, batch);
  return rows;
}

absl::Status RunReference(CheckRows& rows, LoadTimes& times) {
  if (rows.ran) return absl::OkStatus();
  const Clock::time_point t0 = Clock::now();
  ASSIGN_OR_RETURN(rows.want, ref::Run(*rows.raw, rows.feed));
  absl::StatusOr<ref::TensorMap> nf = ref::Run(*rows.raw, rows.nonfinite);
  if (!nf.ok() && !IsStopError(nf.status())) {
    rows.nonfinite_usable = false;
    rows.nonfinite_refusal = std::string(nf.status().message());
  } else {
    ASSIGN_OR_RETURN(rows.want_nonfinite, std::move(nf));
  }
  rows.ran = true;
  times.reference_ms += MsSince(t0);
  return absl::OkStatus();
}

// One comparison of the check: a feed and the reference's answer to it. `nonfinite`: the feed
// holds NaN/inf, and a difference no pass explains is reported rather than fatal.
struct CheckCase {
  ref::TensorMap feed, want;
  bool nonfinite = false;
  // 0: every row is compared. Else the feed alternates blocks of this many checked rows with
  // as many distractor rows (no reference for them): a kernel that mixed rows would corrupt
  // the checked ones.
  int64_t checked_block = 0;
};

// How many of `rows` rows have (r mod 2 * block) < block.
int64_t CheckedCount(int64_t rows, int64_t block) {
  return (rows / (2 * block)) * block + std::min(block, rows % (2 * block));
}

// Rows r of every tensor with (r mod 2 * block) < block.
ref::TensorMap CheckedRows(const ref::TensorMap& all, int64_t block) {
  ref::TensorMap out;
  for (const auto& [name, t] : all) {
    const int64_t rows = t.dim(0), keep = CheckedCount(rows, block);
    std::vector<int64_t> shape = t.shape();
    shape[0] = keep;
    Tensor k(t.dtype(), shape);
    const size_t row_bytes = rows > 0 ? t.nbytes() / rows : 0;
    int64_t j = 0;
    for (int64_t r = 0; r < rows; ++r) {
      if (r % (2 * block) >= block) continue;
      std::memcpy(static_cast<char*>(k.raw_mutable()) + j++ * row_bytes,
                  static_cast<const char*>(t.raw()) + r * row_bytes, row_bytes);
    }
    out[name] = std::move(k);
  }
  return out;
}

// Runs `engine` on `feed` and compares with `want` (the raw graph's outputs), on the checked
// rows only when `checked_block` > 0.
absl::StatusOr<check::Divergence> CheckEngine(runtime::Engine& engine, const ref::TensorMap& feed,
                                              const ref::TensorMap& want,
                                              const check::Tolerance& tol,
                                              int64_t checked_block = 0) {
  std::vector<Tensor> in, out;
  for (const runtime::TensorSpec& s : engine.inputs()) in.push_back(feed.at(s.name));
  RETURN_IF_ERROR(engine.Run(in, out));
  ref::TensorMap got;
  for (size_t i = 0; i < out.size(); ++i) got.emplace(engine.outputs()[i].name, out[i]);
  if (checked_block > 0) got = CheckedRows(got, checked_block);
  return check::CompareOutputs(want, got, tol);
}

}  // namespace

EngineCacheKey CacheKeyFor(const CacheContext& cache, const ModelConfig& config,
                      const PipelineOptions& pipeline, int64_t batch) {
  const WarmupConfig& w = config.warmup;
  std::string warmup = "off";
  if (w.enabled) {
    // "rows": the larger buckets are verified on batches repeating the smallest one's rows;
    // "hints": the feed follows the model's use of its inputs, compared at each output's scale.
    warmup = absl::StrCat("rows,hints,", w.seed, ",", w.rtol, ",", w.atol, ",", w.float_lo, ",",
                          w.float_hi, ",", w.int_lo, ",", w.int_hi);
    for (const auto& [name, r] : w.input_ranges) {
      absl::StrAppend(&warmup, ",", name, ":", r.first, ":", r.second);
    }
    if (!w.samples_key.empty()) absl::StrAppend(&warmup, ",samples:", w.samples_key);
  }
  EngineCacheKey key;
  key.model_hash = cache.model_hash;
  key.compiler_version = kCompilerVersion;
  // The level's pass list, not just its number: a registered test pass changes it.
  key.options = absl::StrCat("O", static_cast<int>(pipeline.level), ";passes=",
                             absl::StrJoin(PipelinePasses(pipeline.level), ","), ";disabled=",
                             absl::StrJoin(pipeline.disabled, ","), ";warmup=", warmup,
                             ";inputs=", InputDimsOf(config).ToString());
  key.device = DeviceFingerprint(config.device);
  key.batch = batch;
  return key;
}

namespace {

using Threads = EngineCacheEntry::Threads;

// A bucket's first engine instance. An explicit cpu_threads is taken as given; the default
// (cores divided among instances) may settle on one thread for a small engine, unless
// `tuned` (a cache entry's record of that measurement) already says which.
absl::StatusOr<std::unique_ptr<runtime::Engine>> FirstEngine(const ModelConfig& config,
                                                             const std::string& layout,
                                                             const CompiledGraph& compiled,
                                                             Threads tuned = Threads::kNotTuned) {
  int threads = CpuThreadsPerInstance(config);
  bool tune_threads = config.cpu_threads == 0;
  if (tune_threads && tuned != Threads::kNotTuned) {
    tune_threads = false;
    if (tuned == Threads::kOne) threads = 1;
  }
  // The warm-up check's first run (right after the build) is the engine's warm-up, and a
  // second one would only cost time (ResNet-50: one more inference per bucket; ViT-L/16 at
  // AVX2: ~8 s at batch 8). Tuning warms the candidates it times itself (tune.cc).
  const bool warm_up = !config.warmup.enabled;
  return BuildEngine(config.device, layout, threads, tune_threads, compiled, warm_up);
}

// The layout a cache entry's engine is built with: a tuned layout is reused (the measurement
// was made for this model, batch and CPU).
std::string LayoutFor(const EngineCacheEntry& e, const ModelConfig& config) {
  return config.cpu_layout == "tune" && !e.engine_layout.empty() ? e.engine_layout
                                                                 : config.cpu_layout;
}

// A cache entry's engine: its graph imported (the constants view the entry's blobs), memory
// planned, the engine built with `layout`.
absl::Status BuildFromEntry(const EngineCacheEntry& e, const ModelConfig& config,
                            const std::string& layout, CompiledGraph& compiled,
                            std::unique_ptr<runtime::Engine>& engine, LoadTimes& times) {
  onnx_io::ImportOptions options;
  options.normalize = false;  // the graph was normalized before it was optimized
  options.external_scheme = kBlobScheme;
  options.external = BlobResolver(e);  // views of the mapped blobs, shared by the buckets
  Clock::time_point t0 = Clock::now();
  ASSIGN_OR_RETURN(compiled.graph, onnx_io::ImportModelBytes(e.graph_onnx, options));
  if (!HasDynamicShapes(*compiled.graph)) {  // else the engine plans its static region
    ASSIGN_OR_RETURN(compiled.plan, plan::PlanMemory(*compiled.graph, plan::PlanOptions{}));
  }
  times.cache_ms += MsSince(t0);
  t0 = Clock::now();
  ASSIGN_OR_RETURN(engine, FirstEngine(config, layout, compiled, e.engine_threads));
  times.engine_ms += MsSince(t0);
  return absl::OkStatus();
}

// Rebuilds the engine from a cache entry (or takes the one CachePrefetch built from it, when
// with the same layout) and re-verifies it: one run on the seeded warm-up inputs against the
// reference outputs stored with it (the reference run is what a hit saves). Any failure
// means the entry is not used.
absl::StatusOr<BucketResult> FromCache(const EngineCacheEntry& e, const ModelConfig& config,
                                       const Graph& raw, int64_t checked_block,
                                       const ref::TensorMap& feed, const check::Tolerance& tol,
                                       LoadTimes& times, std::optional<PreparedBucket>& prepared) {
  BucketResult r;
  const std::string layout = LayoutFor(e, config);
  const bool ahead = prepared && prepared->layout == layout;
  if (ahead) {
    r.compiled = std::move(prepared->compiled);
    r.engine = std::move(prepared->engine);
    times.cache_ms += prepared->cache_ms;
    times.engine_ms += prepared->engine_ms;
  } else {
    RETURN_IF_ERROR(BuildFromEntry(e, config, layout, r.compiled, r.engine, times));
  }
  prepared.reset();
  r.report_json = e.report_json;
  if (config.warmup.enabled) {
    if (!e.checked) return absl::DataLossError("the entry has no reference outputs");
    ref::TensorMap want(e.outputs.begin(), e.outputs.end());
    const Clock::time_point t0 = Clock::now();
    absl::StatusOr<check::Divergence> d =
        CheckEngine(*r.engine, feed, want, ToleranceFor(raw, want, tol), checked_block);
    times.check_ms += MsSince(t0);
    if (!d.ok()) return d.status();
    if (!d->ok) return absl::DataLossError("re-verification failed: " + d->message);
  }
  if (ahead) ++times.built_ahead;
  return r;
}

// Compile + build + check for one bucket, bisecting and disabling passes on a mismatch.
// `pipeline.disabled` grows with the passes the bisection names (shared by later buckets).
absl::StatusOr<BucketResult> CompileAndCheck(const Graph& imported, const Graph& raw,
                                             int64_t batch, const ModelConfig& config,
                                             const std::vector<CheckCase>& cases,
                                             PipelineOptions& pipeline, CheckSummary& check,
                                             LoadTimes& times) {
  const check::Tolerance tol{config.warmup.rtol, config.warmup.atol, {}};
  for (int attempt = 0;; ++attempt) {
    BucketResult r;
    CompileOptions options;
    options.batch = batch;
    options.pipeline = pipeline;
    // Output sizes that depend on input values (a detector's NonZero and NonMaxSuppression):
    // the CPU engine runs that region per call (runtime/cpu/dynamic_engine.h).
    options.allow_dynamic_shapes = true;
    Clock::time_point t0 = Clock::now();
    ASSIGN_OR_RETURN(r.compiled, CompileGraph(imported, options));
    times.compile_ms += MsSince(t0);
    t0 = Clock::now();
    ASSIGN_OR_RETURN(r.engine, FirstEngine(config, config.cpu_layout, r.compiled));
    times.engine_ms += MsSince(t0);
    times.tune_ms += r.engine->info().tune_ms;
    r.report_json = r.compiled.report.ToJson();
    if (!config.warmup.enabled) return r;
    check.ran = true;
    t0 = Clock::now();
    const CheckCase* failed = nullptr;
    check::Divergence d;
    check::Tolerance failed_tol = tol;
    for (const CheckCase& c : cases) {
      // An int8 model is compared within its quantization's own step, and every output
      // within its own scale (differential.h).
      const check::Tolerance case_tol = ToleranceFor(raw, c.want, tol);
      ASSIGN_OR_RETURN(d, CheckEngine(*r.engine, c.feed, c.want, case_tol, c.checked_block));
      if (c.nonfinite) check.nonfinite_checked = true;
      if (!c.nonfinite) {
        check.max_abs_err = std::max(check.max_abs_err, d.max_abs_err);
        check.max_rel_err = std::max(check.max_rel_err, d.max_rel_err);
      }
      if (!d.ok) {
        failed = &c;
        failed_tol = case_tol;
        break;
      }
    }
    times.check_ms += MsSince(t0);
    if (!failed) return r;
    t0 = Clock::now();
    const std::string where = absl::StrCat(
        "batch ", batch, failed->nonfinite ? ", non-finite inputs" : "", ": ", d.message);
    ASSIGN_OR_RETURN(check::BisectResult b, check::BisectPipeline(raw, pipeline, failed->feed, failed_tol));
    times.check_ms += MsSince(t0);
    if (b.ok && failed->nonfinite) {
      // The engine's kernels, not a pass: served, and said so.
      check.nonfinite_ok = false;
      check.nonfinite_message = absl::StrCat("on ", config.device, " (", where, ")");
      spdlog::warn("warm-up check: the engine differs from the reference on non-finite inputs {}",
                   check.nonfinite_message);
      return r;
    }
    if (b.ok || attempt >= kMaxBisections) {
      check.ok = false;
      check.message = absl::StrCat(
          "warm-up check failed on ", config.device, " (", where, ")",
          b.ok ? "; every pass prefix matches the reference, so the engine itself diverges"
               : "; still failing after disabling passes");
      return absl::FailedPreconditionError(check.message);
    }
    pipeline.disabled.insert(b.first_bad_pass);
    check.disabled_passes.insert(b.first_bad_pass);
    check.message = absl::StrCat("disabled pass '", b.first_bad_pass, "' (", where, ")");
  }
}

// The cache entry for a freshly built bucket; nullopt when it could not be re-verified later
// (an output the file format cannot hold).
std::optional<EngineCacheEntry> EntryFor(const BucketResult& r, const CheckSummary& check,
                                         const ModelConfig& config, const ref::TensorMap& want) {
  EngineCacheEntry e;
  onnx_io::ExportOptions export_options;
  export_options.external = BlobWriter(e);  // the weights go to blobs shared by the buckets
  auto proto = onnx_io::ExportModel(*r.compiled.graph, export_options);
  if (!proto.ok()) return std::nullopt;
  e.graph_onnx = proto->SerializeAsString();
  e.report_json = r.report_json;
  e.disabled_passes = check.disabled_passes;
  e.check_message = check.message;
  e.max_abs_err = check.max_abs_err;
  e.max_rel_err = check.max_rel_err;
  e.checked = config.warmup.enabled;
  e.engine_layout = r.engine->info().layout;
  if (config.cpu_threads == 0) {  // FirstEngine measured one thread against the team
    const bool one = r.engine->info().threads == 1 && CpuThreadsPerInstance(config) > 1;
    e.engine_threads = one ? Threads::kOne : Threads::kTeam;
  }
  for (const auto& [name, t] : want) {
    if (t.dtype() == DType::kString) return std::nullopt;
    e.outputs.emplace_back(name, t);
  }
  return e;
}

void MergeCachedCheck(const EngineCacheEntry& e, PipelineOptions& pipeline, CheckSummary& check) {
  check.ran |= e.checked;
  check.max_abs_err = std::max(check.max_abs_err, e.max_abs_err);
  check.max_rel_err = std::max(check.max_rel_err, e.max_rel_err);
  for (const std::string& p : e.disabled_passes) {
    pipeline.disabled.insert(p);
    check.disabled_passes.insert(p);
  }
  if (!e.check_message.empty()) check.message = e.check_message;
}

// The check's comparisons for one bucket. The smallest bucket: the rows themselves (finite,
// then non-finite). A larger one: batches repeating those rows when the model allows it,
// else its own random feed against a full reference run.
absl::StatusOr<std::vector<CheckCase>> CasesFor(CheckRows& rows, const Graph& raw, int64_t batch,
                                                const ModelConfig& config, LoadTimes& times) {
  RETURN_IF_ERROR(RunReference(rows, times));
  std::vector<CheckCase> cases;
  if (batch == rows.batch) {
    cases.push_back({rows.feed, rows.want, false});
    if (rows.nonfinite_usable) cases.push_back({rows.nonfinite, rows.want_nonfinite, true});
    return cases;
  }
  if (rows.tileable) {
    // The non-finite rows are checked at the smallest bucket only: their exact paths are
    // the same kernels at every batch, and building them costs time at each.
    CheckCase c;
    ASSIGN_OR_RETURN(c.feed, check::TileRows({&rows.feed, &rows.distractor}, batch));
    c.checked_block = rows.batch;
    ASSIGN_OR_RETURN(c.want, check::TileRows({&rows.want}, CheckedCount(batch, rows.batch)));
    cases.push_back(std::move(c));
    return cases;
  }
  CheckCase own;
  const Clock::time_point t0 = Clock::now();
  ASSIGN_OR_RETURN(own.feed, check::RandomInputs(raw, RangesOf(config.warmup, raw)));
  ASSIGN_OR_RETURN(own.want, ref::Run(raw, own.feed));
  times.reference_ms += MsSince(t0);
  cases.push_back(std::move(own));
  return cases;
}

// The feed a cached entry of this bucket was verified on (its stored outputs answer it),
// without running the reference: the rows, or batches repeating them, or the bucket's own.
// (`*block`: the case's checked_block.)
absl::StatusOr<ref::TensorMap> CachedFeedFor(const CheckRows& rows, const Graph& raw,
                                             int64_t batch, const ModelConfig& config,
                                             int64_t* block) {
  *block = 0;
  if (batch == rows.batch) return rows.feed;
  if (rows.tileable) {
    *block = rows.batch;
    return check::TileRows({&rows.feed, &rows.distractor}, batch);
  }
  return check::RandomInputs(raw, RangesOf(config.warmup, raw));
}

// One bucket: from the cache when it holds a verified entry, else compiled and checked (and
// then stored).
// (`position`: the bucket's place in the build order, for CachePrefetch.)
absl::StatusOr<BucketResult> BuildBucket(const Graph& imported, int64_t batch, size_t position,
                                         const ModelConfig& config, const CacheContext& cache,
                                         PipelineOptions& pipeline, CheckSummary& check,
                                         CheckRows* rows, LoadTimes& times) {
  std::unique_ptr<Graph> raw = imported.Clone();
  RETURN_IF_ERROR(shape::Specialize(*raw, batch));
  EngineCacheKey key;
  if (cache.cache) {
    key = CacheKeyFor(cache, config, pipeline, batch);
    std::optional<PreparedBucket> prepared;
    if (cache.prefetch) prepared = cache.prefetch->Take(position, key.ToString());
    const Clock::time_point t0 = Clock::now();
    std::shared_ptr<const EngineCacheEntry> e = prepared ? prepared->entry : cache.cache->Lookup(key);
    times.cache_ms += MsSince(t0);
    if (e) {
      const check::Tolerance tol{config.warmup.rtol, config.warmup.atol, {}};
      absl::StatusOr<BucketResult> r = absl::UnknownError("no feed");
      int64_t block = 0;
      if (!config.warmup.enabled) {
        r = FromCache(*e, config, *raw, 0, {}, tol, times, prepared);
      } else if (auto feed = CachedFeedFor(*rows, *raw, batch, config, &block); feed.ok()) {
        r = FromCache(*e, config, *raw, block, *feed, tol, times, prepared);
      }
      if (r.ok()) {
        MergeCachedCheck(*e, pipeline, check);
        metrics::EngineCacheResult(/*hit=*/true);
        ++times.cache_hits;
        return r;
      }
      if (IsStopError(r.status())) return r.status();
      spdlog::warn("engine cache: batch {}: {}; rebuilding", batch,
                   std::string(r.status().message()));
      cache.cache->Invalidate(key);
    }
  }
  // A miss (no entry, or one that failed its re-verification) is counted once per bucket.
  if (cache.cache) metrics::EngineCacheResult(/*hit=*/false);
  std::vector<CheckCase> cases;
  if (config.warmup.enabled) {
    ASSIGN_OR_RETURN(cases, CasesFor(*rows, *raw, batch, config, times));
  }
  ASSIGN_OR_RETURN(BucketResult r,
                   CompileAndCheck(imported, *raw, batch, config, cases, pipeline, check, times));
  if (cache.cache) {
    // The first case's outputs: what CachedFeedFor's feed gets from the reference.
    const ref::TensorMap want = cases.empty() ? ref::TensorMap{} : cases.front().want;
    std::optional<EngineCacheEntry> e = EntryFor(r, check, config, want);
    absl::Status s = e ? cache.cache->Store(key, std::move(*e)) : absl::OkStatus();
    if (!s.ok()) spdlog::warn("{}", std::string(s.message()));
  }
  return r;
}

// The smallest bucket, the largest, then the ones between: a layout is tuned for the two
// ends only, and a bucket between them takes the nearer end's choice (geometrically: b2 is
// nearer b1 than b8). Tuning every bucket cost ResNet-50 6.9 s of a 20 s load.
// The model's declared shape of output `name` (-1 for a dim not known before a run); empty
// when it declares none. For an output whose rank the engine learns only per run (a
// detector's boxes, computed under If).
std::vector<int64_t> DeclaredShape(const Graph& model, const std::string& name) {
  for (const Value* v : model.outputs) {
    if (v->name != name || !v->shape) continue;
    std::vector<int64_t> dims;
    for (const Dim& d : *v->shape) dims.push_back(d.known() ? d.value : -1);
    return dims;
  }
  return {};
}

// A batch of several requests is split back into rows; an output whose size depends on the
// input values (detections) has no rows to split, so such a model serves one request per run.
absl::Status CheckRowsSplit(const runtime::Engine& engine, const std::vector<int64_t>& buckets) {
  if (buckets.back() <= 1) return absl::OkStatus();
  for (const runtime::TensorSpec& s : engine.outputs()) {
    const bool run_time = s.shape.empty() ||
                          std::any_of(s.shape.begin(), s.shape.end(), [](int64_t d) { return d < 0; });
    if (run_time) {
      return absl::FailedPreconditionError(absl::StrCat(
          "output '", s.name, "' has a size that depends on the input values, so a batch of ",
          "requests cannot be split back into rows: set batch_buckets: [1] for this model"));
    }
  }
  return absl::OkStatus();
}

std::vector<int64_t> BuildOrder(const std::vector<int64_t>& buckets) {
  if (buckets.size() <= 2) return buckets;
  std::vector<int64_t> order = {buckets.front(), buckets.back()};
  order.insert(order.end(), buckets.begin() + 1, buckets.end() - 1);
  return order;
}

ModelConfig ConfigForBucket(const ModelConfig& config, const BuiltModel& m, int64_t batch) {
  if (config.cpu_layout != "tune" || m.buckets.size() <= 2 || batch == m.buckets.front() ||
      batch == m.buckets.back()) {
    return config;
  }
  const int64_t lo = m.buckets.front(), hi = m.buckets.back();
  const int64_t nearer = batch * batch <= lo * hi ? lo : hi;
  auto it = m.engines.find(nearer);
  if (it == m.engines.end() || it->second.empty() || it->second[0]->info().layout.empty()) {
    return config;
  }
  ModelConfig c = config;
  c.cpu_layout = it->second[0]->info().layout;
  return c;
}



// input_shapes first, then the dynamic_dims symbols at their warm-up sizes. `symbols` gets,
// per input and dim, the dynamic symbol bound there ("" elsewhere): a dim input_shapes fixed
// is not dynamic, and a dynamic_dims name no open dim carries is a config error.
// The symbolic dims input_shapes leaves open get their profiles first (`config` takes them:
// dim_profiles.h), so every one of them is dynamic.
absl::Status BindConfigDims(Graph& g, ModelConfig& config, const WarmupSamples& samples,
                            DimSymbols& symbols) {
  shape::InputDims fixed;
  fixed.shapes = config.input_shapes;
  RETURN_IF_ERROR(shape::BindInputDims(g, fixed));
  RETURN_IF_ERROR(ResolveDimProfiles(g, config, SampleDims(samples, g)));
  if (config.dynamic_dims.empty()) return absl::OkStatus();
  std::set<std::string> seen;
  for (const Value* in : g.inputs) {
    std::vector<std::string>& row = symbols.emplace_back(in->shape ? in->shape->size() : 0);
    for (size_t i = 0; i < row.size(); ++i) {
      const Dim& d = (*in->shape)[i];
      if (d.known() || !config.dynamic_dims.count(d.param)) continue;
      if (i == 0) {  // the batch dim varies per request already (batch_buckets)
        return absl::InvalidArgumentError(absl::StrCat(
            "dynamic_dims names '", d.param, "', dim 0 of input '", in->name, "' (the batch)"));
      }
      row[i] = d.param;
      seen.insert(d.param);
    }
  }
  for (const auto& [name, size] : config.dynamic_dims) {
    if (!seen.count(name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "dynamic_dims names '", name,
          "', which is no symbolic input dim left open by input_shapes"));
    }
  }
  shape::InputDims dynamic;
  dynamic.symbols = config.dynamic_dims;
  return shape::BindInputDims(g, dynamic);
}

// Shows the dynamic dims as -1 in the signature (inputs, and every output dim the model's
// shapes, inferred with the dynamic dims left symbolic, do not fix), and records where they
// are for request validation and routing.
void MarkDynamicDims(const Graph& model, const ModelConfig& config, DimSymbols symbols,
                     ModelSignature& sig) {
  if (config.dynamic_dims.empty()) return;
  for (size_t k = 0; k < sig.inputs.size() && k < symbols.size(); ++k) {
    for (size_t i = 0; i < symbols[k].size() && i < sig.inputs[k].shape.size(); ++i) {
      if (!symbols[k][i].empty()) sig.inputs[k].shape[i] = -1;
    }
  }
  std::unique_ptr<Graph> open = model.Clone();
  shape::InputDims fixed;
  fixed.shapes = config.input_shapes;
  // On failure the declared output shapes stand in for the inferred ones.
  if (shape::BindInputDims(*open, fixed).ok()) (void)shape::InferShapes(*open);
  for (runtime::TensorSpec& out : sig.outputs) {
    for (const Value* v : open->outputs) {
      if (v->name != out.name) continue;
      for (size_t i = 0; i < out.shape.size(); ++i) {
        if (!v->shape || i >= v->shape->size() || !(*v->shape)[i].known()) out.shape[i] = -1;
      }
    }
  }
  sig.dim_symbols = std::move(symbols);
  sig.default_dims = config.dynamic_dims;
  sig.dim_ranges = config.dynamic_dim_ranges;
}

// Proves whether the dynamic model `m` may be served padded to shape classes and records
// the plan (or why not) in `m`. `config` has every dynamic symbol's profile.
void ProveClasses(const Graph& model, const ModelConfig& config, BuiltModel& m) {
  const Clock::time_point t0 = Clock::now();
  std::unique_ptr<Graph> open = model.Clone();
  shape::InputDims fixed;
  fixed.shapes = config.input_shapes;
  const absl::Status bound = shape::BindInputDims(*open, fixed);
  absl::StatusOr<PaddingPlan> plan =
      bound.ok() ? ProvePadding(*open, config, m.signature.dim_symbols,
                                [&](const Graph& g) { return RangesOf(config.warmup, g); },
                                kMaxShapeClasses)
                 : absl::StatusOr<PaddingPlan>(bound);
  if (plan.ok()) {
    m.padding = std::move(*plan);
  } else {
    m.padding_refused = std::string(plan.status().message());
  }
  m.times.padding_ms = MsSince(t0);
}

}  // namespace

std::string LoadTimes::ToString() const {
  return absl::StrFormat(
      "import %.0f ms, engine cache %.0f ms, reference %.0f ms, compile %.0f ms, engines %.0f ms "
      "(tuning %.0f ms), check %.0f ms, %d bucket(s) from the engine cache (%d built beside "
      "the import), padding proof %.0f ms, shape classes %.0f ms",
      import_ms, cache_ms, reference_ms, compile_ms, engine_ms, tune_ms, check_ms, cache_hits,
      built_ahead, padding_ms, classes_ms);
}

CachePrefetch::CachePrefetch(const CacheContext& cache, const ModelConfig& config)
    : cache_{cache.cache, cache.model_hash, nullptr}, config_(config) {
  worker_ = std::thread([this] { Run(); });
}

CachePrefetch::~CachePrefetch() {
  cancel_ = true;
  worker_.join();
}

void CachePrefetch::Run() {
  // BuildModel's starting pipeline, so that the keys are the ones it will ask for.
  PipelineOptions pipeline;
  pipeline.level = config_.opt_level;
  pipeline.disabled = config_.disabled_passes;
  for (const std::string& p : PassesOffOn(config_.device)) pipeline.disabled.insert(p);
  std::map<int64_t, std::string> layouts;  // bucket -> its engine's layout
  for (int64_t batch : BuildOrder(config_.batch_buckets)) {
    if (cancel_ || !Prepare(batch, pipeline, layouts)) break;
  }
  std::lock_guard<std::mutex> lk(mu_);
  finished_ = true;
  cv_.notify_all();
}

bool CachePrefetch::Prepare(int64_t batch, PipelineOptions& pipeline,
                            std::map<int64_t, std::string>& layouts) {
  const EngineCacheKey key = CacheKeyFor(cache_, config_, pipeline, batch);
  std::shared_ptr<const EngineCacheEntry> entry = cache_.cache->Lookup(key);
  if (!entry) return false;  // BuildModel compiles from here on, and may bisect
  // As BuildModel's MergeCachedCheck: the next bucket's key names these passes too.
  pipeline.disabled.insert(entry->disabled_passes.begin(), entry->disabled_passes.end());
  // As ConfigForBucket: a bucket between the ends takes the nearer end's layout.
  ModelConfig c = config_;
  const std::vector<int64_t>& b = config_.batch_buckets;
  if (c.cpu_layout == "tune" && b.size() > 2 && batch != b.front() && batch != b.back()) {
    const int64_t nearer = batch * batch <= b.front() * b.back() ? b.front() : b.back();
    auto it = layouts.find(nearer);
    if (it != layouts.end() && !it->second.empty()) c.cpu_layout = it->second;
  }
  PreparedBucket p;
  p.key = key.ToString();
  p.entry = entry;
  p.layout = LayoutFor(*entry, c);
  if (p.layout == "tune") return false;  // a measurement: BuildModel's to make
  LoadTimes t;
  if (!BuildFromEntry(*entry, c, p.layout, p.compiled, p.engine, t).ok()) return false;
  p.cache_ms = t.cache_ms;
  p.engine_ms = t.engine_ms;
  layouts[batch] = p.engine->info().layout;
  std::lock_guard<std::mutex> lk(mu_);
  ready_.push_back(std::move(p));
  cv_.notify_all();
  return true;
}

std::optional<PreparedBucket> CachePrefetch::Take(size_t position, const std::string& key) {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return ready_.size() > position || finished_; });
  if (ready_.size() <= position || !ready_[position]) return std::nullopt;
  std::optional<PreparedBucket> p = std::move(ready_[position]);
  ready_[position].reset();
  if (p->key != key) {
    // BuildModel went another way (a bucket failed its re-verification and was rebuilt):
    // what follows was prepared for keys it will not ask for.
    cancel_ = true;
    return std::nullopt;
  }
  return p;
}

shape::InputDims InputDimsOf(const ModelConfig& config) {
  shape::InputDims dims;
  dims.shapes = config.input_shapes;
  dims.symbols = config.dynamic_dims;
  return dims;
}

absl::StatusOr<ModelSignature> SignatureOf(const Graph& imported, const ModelConfig& config) {
  ModelSignature sig;
  sig.batchable = !imported.inputs.empty();
  for (const Value* v : imported.inputs) {
    if (!v->shape || v->shape->empty() || (*v->shape)[0].known()) sig.batchable = false;
  }
  // Every dim but a batchable model's dim 0 must have a size by now (input_shapes).
  RETURN_IF_ERROR(shape::CheckStaticInputs(imported, /*allow_symbolic_batch=*/sig.batchable));
  for (const Value* v : imported.inputs) {
    runtime::TensorSpec s{v->name, v->dtype, {}};
    for (size_t i = 0; i < v->shape->size(); ++i) {
      s.shape.push_back(i == 0 && sig.batchable ? -1 : (*v->shape)[i].value);
    }
    sig.inputs.push_back(std::move(s));
  }
  sig.max_batch_size = sig.batchable ? config.max_batch_size : 1;
  return sig;
}

absl::StatusOr<BuiltModel> BuildModel(const Graph& model, const ModelConfig& given,
                                      const ProgressFn& progress, const CacheContext& cache,
                                      std::shared_ptr<passes::FoldCache> fold_cache) {
  // The reference runs and the compiles reuse freed multi-MiB buffers (base/heap_scope.h).
  // Not the import: it copies the weights into buffers that stay, and competes with the
  // engines a warm load rebuilds beside it (measured: ViT-L/16's warm import 5 -> 8 s).
  const LoadHeapScope heap;
  BuiltModel m;
  // The config's input_shapes fix symbolic dims other than the batch (a sequence length):
  // from here on the model is the one with those sizes.
  // `config` is the given one with every open symbolic dim's profile filled in.
  std::unique_ptr<Graph> bound = model.Clone();
  ModelConfig config = given;
  WarmupSamples samples = SamplesFor(model, config);
  DimSymbols dynamic;
  RETURN_IF_ERROR(BindConfigDims(*bound, config, samples, dynamic));
  const Graph& imported = *bound;
  ASSIGN_OR_RETURN(m.signature, SignatureOf(imported, config));
  m.buckets = m.signature.batchable ? config.batch_buckets : std::vector<int64_t>{1};
  PipelineOptions pipeline;
  pipeline.level = config.opt_level;
  pipeline.disabled = config.disabled_passes;
  for (const std::string& p : PassesOffOn(config.device)) pipeline.disabled.insert(p);
  // The buckets' compiles fold each large constant once (a ViT-L/16: 1.2 GB of transposed
  // weights per bucket before), and so their engines share one prepacked copy of it.
  m.fold_cache = fold_cache ? std::move(fold_cache) : std::make_shared<passes::FoldCache>();
  pipeline.fold_cache = m.fold_cache;
  m.check.ok = true;
  std::optional<CheckRows> rows;
  if (config.warmup.enabled) {
    ASSIGN_OR_RETURN(
        rows, MakeCheckRows(imported, m.buckets.front(), m.signature.batchable, config, samples));
  }
  const std::vector<int64_t> order = BuildOrder(m.buckets);
  for (size_t position = 0; position < order.size(); ++position) {
    const int64_t batch = order[position];
    RETURN_IF_ERROR(CheckStop());
    if (progress) progress(absl::StrCat("compiling and checking batch ", batch));
    const ModelConfig bucket_config = ConfigForBucket(config, m, batch);
    ASSIGN_OR_RETURN(BucketResult r,
                     BuildBucket(imported, batch, position, bucket_config, cache, pipeline,
                                 m.check, rows ? &*rows : nullptr, m.times));
    auto& instances = m.engines[batch];
    // Further instances take the layout and thread count the first one settled on (tuned
    // once, and alike).
    const std::string& chosen = r.engine->info().layout;
    const std::string layout = chosen.empty() ? config.cpu_layout : chosen;
    const int threads = r.engine->info().threads > 0 ? r.engine->info().threads
                                                     : CpuThreadsPerInstance(config);
    for (int i = 1; i < config.instances; ++i) {
      ASSIGN_OR_RETURN(auto extra, BuildEngine(config.device, layout, threads, false,
                                               r.compiled));
      instances.push_back(std::move(extra));
    }
    RETURN_IF_ERROR(CheckRowsSplit(*r.engine, m.buckets));
    instances.insert(instances.begin(), std::move(r.engine));
    if (batch == m.buckets.back()) m.report_json = r.report_json;
  }
  for (const auto& [batch, list] : m.engines) {
    for (size_t i = 0; i < m.signature.inputs.size(); ++i) {
      if (list[0]->inputs().size() != m.signature.inputs.size() ||
          list[0]->inputs()[i].name != m.signature.inputs[i].name) {
        return absl::InternalError("engine inputs are not in the model's input order");
      }
    }
  }
  // Output specs come from the engines (declared output shapes may be unknown before
  // specialization).
  for (runtime::TensorSpec s : m.engines.begin()->second[0]->outputs()) {
    if (m.signature.batchable && !s.shape.empty()) s.shape[0] = -1;
    if (s.shape.empty()) s.shape = DeclaredShape(imported, s.name);  // rank known only there
    m.signature.outputs.push_back(std::move(s));
  }
  MarkDynamicDims(model, config, std::move(dynamic), m.signature);
  if (m.signature.dynamic() && config.shape_classes == "auto") ProveClasses(model, config, m);
  return m;
}

absl::StatusOr<std::unique_ptr<runtime::Engine>> BuildShapeEngine(
    const Graph& model, const ModelConfig& config, const BuiltModel& base,
    const std::map<std::string, int64_t>& dims, int64_t bucket, bool check) {
  ModelConfig c = config;
  c.dynamic_dims = dims;
  c.dynamic_dim_ranges = base.signature.dim_ranges;  // known: no probing per shape
  c.batch_buckets = {bucket};
  c.max_batch_size = bucket;
  c.instances = 1;  // a shape's batcher runs one batch at a time
  c.shape_classes = "off";  // proven (or refused) once, by the model's own build
  if (!check) c.warmup.enabled = false;
  c.disabled_passes.insert(base.check.disabled_passes.begin(), base.check.disabled_passes.end());
  if (!base.engines.empty() && !base.engines.begin()->second.empty()) {
    const runtime::EngineInfo& first = base.engines.begin()->second[0]->info();
    if (c.cpu_layout == "tune" && !first.layout.empty()) c.cpu_layout = first.layout;
    if (c.cpu_threads == 0 && first.threads > 0) c.cpu_threads = first.threads;
  }
  ASSIGN_OR_RETURN(BuiltModel m, BuildModel(model, c, nullptr, {}, base.fold_cache));
  if (m.engines.empty() || m.engines.begin()->second.empty()) {
    return absl::InternalError("the shape's build made no engine");
  }
  return std::move(m.engines.begin()->second[0]);
}

}  // namespace kiln::server

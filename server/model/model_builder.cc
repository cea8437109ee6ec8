#include "server/model/model_builder.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/elapsed.h"
#include "base/heap_scope.h"
#include "base/stop.h"
#include "compiler/compile.h"
#include "compiler/onnx/exporter.h"
#include "compiler/onnx/importer.h"
#include "compiler/plan/memory_plan.h"
#include "compiler/shape/infer.h"
#include "ops/interpreter.h"
#include "runtime/check/differential.h"
#include "server/metrics/kiln_metrics.h"
#include "server/model/bucket_engines.h"
#include "server/model/cached_bucket.h"
#include "server/model/calibration.h"
#include "server/model/dim_profiles.h"
#include "server/model/engine_factory.h"
#include "server/model/model_dims.h"
#include "server/model/precision.h"
#include "server/model/precision_speed.h"
#include "server/model/precision_verdict.h"
#include "server/model/warmup_check.h"
#include "server/model/warmup_samples.h"

namespace kiln::server {
namespace {

constexpr int kMaxBisections = 4;  // each disables one pass; more means something else is wrong

using Clock = std::chrono::steady_clock;

// Compile + build + check for one bucket, bisecting and disabling passes on a mismatch.
// `pipeline.disabled` grows with the passes the bisection names (shared by later buckets).
absl::StatusOr<BucketResult> CompileAndCheck(const Graph& imported, const Graph& raw, int64_t batch,
                                             const ModelConfig& config,
                                             const std::vector<CheckCase>& cases,
                                             PipelineOptions& pipeline, CheckSummary& check,
                                             LoadTimes& times) {
  for (int attempt = 0;; ++attempt) {
    const check::Tolerance tol = ToleranceOf(config, pipeline);
    BucketResult r;
    CompileOptions options;
    options.batch = batch;
    options.pipeline = pipeline;
    // Output sizes that depend on input values (a detector's NonZero and NonMaxSuppression):
    // the CPU and CUDA engines run that region per call (runtime/dynamic_engine.h).
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
      if (c.nonfinite && passes::IsInt8Precision(pipeline.precision)) {
        // Quantizing maps NaN and infinities to numbers: nothing to compare, and no pass to
        // bisect for it.
        check.nonfinite_ok = false;
        check.nonfinite_message = "int8: quantization maps NaN and infinities to numbers";
        continue;
      }
      // An int8 model is compared within its quantization's own step, and every output
      // within its own scale (differential.h).
      const check::Tolerance case_tol = ToleranceFor(raw, c.want, tol);
      ASSIGN_OR_RETURN(d, CheckEngine(*r.engine, c.feed, c.want, case_tol, c.checked_block));
      if (!c.nonfinite) WithinBudget(config, pipeline, d);
      if (c.nonfinite) check.nonfinite_checked = true;
      // A lowered engine's failing errors go to its fallback message, not to the summary.
      if (!c.nonfinite && (d.ok || pipeline.precision == "float32")) {
        check.max_abs_err = std::max(check.max_abs_err, d.max_abs_err);
        check.max_rel_err = std::max(check.max_rel_err, d.max_rel_err);
        check.norm_rel_err = std::max(check.norm_rel_err, d.norm_rel_err);
      }
      if (!d.ok) {
        failed = &c;
        failed_tol = case_tol;
        break;
      }
    }
    times.check_ms += MsSince(t0);
    if (!failed) return r;
    if (pipeline.precision != "float32" && !failed->nonfinite) {
      // The lowered products exceed the budget: no pass is at fault, the precision is.
      FallBack(batch, d, config, pipeline, check);
      --attempt;
      continue;
    }
    t0 = Clock::now();
    const std::string where = absl::StrCat(
        "batch ", batch, failed->nonfinite ? ", non-finite inputs" : "", ": ", d.message);
    ASSIGN_OR_RETURN(check::BisectResult b,
                     check::BisectPipeline(raw, pipeline, failed->feed, failed_tol));
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
    std::shared_ptr<const EngineCacheEntry> e =
        prepared ? prepared->entry : cache.cache->Lookup(key);
    times.cache_ms += MsSince(t0);
    if (e) {
      const check::Tolerance tol = ToleranceOf(config, pipeline);
      absl::StatusOr<BucketResult> r = absl::UnknownError("no feed");
      int64_t block = 0;
      if (!config.warmup.enabled) {
        r = FromCache(*e, config, pipeline, *raw, 0, {}, tol, times, prepared);
      } else if (auto feed = CachedFeedFor(*rows, *raw, batch, config, &block); feed.ok()) {
        r = FromCache(*e, config, pipeline, *raw, block, *feed, tol, times, prepared);
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
  // Calibration first: on the check's rows it also gives the reference's answer to the first.
  RETURN_IF_ERROR(EnsureCalibration(rows, config, pipeline, check, times));
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
    // Under the key of what was built: a lowered compile that fell back is a float32 entry.
    key = CacheKeyFor(cache, config, pipeline, batch);
    absl::Status s = e ? cache.cache->Store(key, std::move(*e)) : absl::OkStatus();
    if (!s.ok()) spdlog::warn("{}", std::string(s.message()));
  }
  return r;
}

// `prefer: fastest`: the first bucket's lowered engine against its rivals (precision_speed.h:
// float32 for bf16; bf16 and float32 for int8); when a rival wins, this bucket is rebuilt
// (and checked) at the fastest rival's precision, which then faces its own rivals, and every
// later bucket compiles at the winner's.
absl::Status PreferFaster(const Graph& imported, int64_t batch, size_t position,
                          const ModelConfig& config, const CacheContext& cache,
                          PipelineOptions& pipeline, CheckSummary& check, CheckRows* rows,
                          LoadTimes& times, BucketResult& r) {
  while (position == 0 && ShouldCompareSpeed(config, pipeline, *r.engine)) {
    ASSIGN_OR_RETURN(const std::string rival,
                     FasterRival(imported, batch, config, pipeline,
                                 RivalsOf(pipeline.precision, config.device), *r.engine, check));
    if (rival.empty()) return absl::OkStatus();
    pipeline.precision = rival;
    check.max_abs_err = check.max_rel_err = check.norm_rel_err = 0;  // the lowered engine's
    check.nonfinite_ok = true;  // int8's verdict; the rival's own check decides
    check.nonfinite_message.clear();
    ASSIGN_OR_RETURN(
        r, BuildBucket(imported, batch, position, config, cache, pipeline, check, rows, times));
  }
  return absl::OkStatus();
}

// Starts `pipeline` where the cached verdict under `key` says the ladder settled; false
// without one.
bool StartAtVerdict(const CacheContext& cache, const EngineCacheKey& key, PipelineOptions& pipeline,
                    CheckSummary& check) {
  std::optional<PrecisionVerdict> v = LookupVerdict(cache, key);
  if (!v) return false;
  pipeline.precision = v->precision;
  pipeline.int8_noise_kept = v->int8_noise_kept;
  pipeline.calibration = v->calibration;
  check.precision_message = v->message;
  AddPrecisionNote(check, "the ladder's verdict, from the engine cache");
  return true;
}

// Where the precision ladder starts: float32 (mode float32, or no lower precision here,
// said), a shape's model's verdict (config.precision.start), a verdict an earlier load left in
// the engine cache, else the device's lowest precision; with the key to leave this load's
// verdict under.
struct LadderStart {
  std::optional<EngineCacheKey> verdict_key;
  bool from_verdict = false;
};
LadderStart StartLadder(const ModelConfig& config, const CacheContext& cache, int64_t first_bucket,
                        PipelineOptions& pipeline, CheckSummary& check) {
  LadderStart out;
  if (config.precision.mode != "auto") return out;
  const std::string lower = LowestPrecisionOn(config.device, config.precision);
  const std::string& start = config.precision.start;
  if (lower.empty()) {
    check.precision_message = "no lower precision on " + config.device + " here; float32";
    return out;
  }
  if (!start.empty()) {
    // A shape's engines start where the model's settled (a mix of buckets: float32).
    const bool lowered = passes::IsLowerPrecision(start) || passes::IsInt8Precision(start);
    pipeline.precision = lowered ? start : "float32";
    pipeline.int8_noise_kept = config.precision.int8_noise_kept;
    return out;
  }
  pipeline.precision = lower;
  if (!cache.cache) return out;
  // A reload or warm restart starts where the ladder settled before (precision_verdict.h).
  out.verdict_key = VerdictKeyFor(cache, config, pipeline, first_bucket);
  out.from_verdict = StartAtVerdict(cache, *out.verdict_key, pipeline, check);
  return out;
}

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
    const bool run_time = s.shape.empty() || std::any_of(s.shape.begin(), s.shape.end(),
                                                         [](int64_t d) { return d < 0; });
    if (run_time) {
      return absl::FailedPreconditionError(absl::StrCat(
          "output '", s.name, "' has a size that depends on the input values, so a batch of ",
          "requests cannot be split back into rows: set batch_buckets: [1] for this model"));
    }
  }
  return absl::OkStatus();
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

}  // namespace

std::string LoadTimes::ToString() const {
  return absl::StrFormat(
      "import %.0f ms, engine cache %.0f ms, reference %.0f ms, compile %.0f ms, engines %.0f ms "
      "(tuning %.0f ms), check %.0f ms, %d bucket(s) from the engine cache (%d built beside "
      "the import), padding proof %.0f ms, shape classes %.0f ms",
      import_ms, cache_ms, reference_ms, compile_ms, engine_ms, tune_ms, check_ms, cache_hits,
      built_ahead, padding_ms, classes_ms);
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

const char* CheckOutcome(const absl::Status& status, const CheckSummary* check) {
  if (!status.ok()) {
    return status.code() == absl::StatusCode::kFailedPrecondition ? "fail" : nullptr;
  }
  if (check == nullptr || !check->ran) return nullptr;
  return !check->nonfinite_ok             ? "pass_finite_only"
         : check->disabled_passes.empty() ? "pass"
                                          : "pass_after_bisect";
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
  const LadderStart ladder = StartLadder(config, cache, m.buckets.front(), pipeline, m.check);
  // The buckets' compiles fold each large constant once (a ViT-L/16: 1.2 GB of transposed
  // weights per bucket before), and so their engines share one prepacked copy of it.
  const bool later_shape = fold_cache != nullptr;  // a shape of a model already loaded
  m.fold_cache = fold_cache ? std::move(fold_cache) : std::make_shared<passes::FoldCache>();
  pipeline.fold_cache = m.fold_cache;
  m.check.ok = true;
  std::optional<CheckRows> rows;
  if (config.warmup.enabled) {
    ASSIGN_OR_RETURN(
        rows, MakeCheckRows(imported, m.buckets.front(), m.signature.batchable, config, samples));
    // The reference finds the compiles' folds there; it keeps its own at load only (a later
    // shape's would be kept once per shape, see ref::FindOnly).
    rows->constants = later_shape ? std::make_shared<ref::FindOnly>(m.fold_cache)
                                  : std::shared_ptr<ref::ConstantResults>(m.fold_cache);
  }
  const std::vector<int64_t> order = BuildOrder(m.buckets);
  std::map<int64_t, std::string> precision_by_bucket;
  PrecisionVerdict settled;
  for (size_t position = 0; position < order.size(); ++position) {
    const int64_t batch = order[position];
    RETURN_IF_ERROR(CheckStop());
    if (progress) progress(absl::StrCat("compiling and checking batch ", batch));
    const ModelConfig bucket_config = ConfigForBucket(config, m, batch);
    ASSIGN_OR_RETURN(BucketResult r,
                     BuildBucket(imported, batch, position, bucket_config, cache, pipeline, m.check,
                                 rows ? &*rows : nullptr, m.times));
    if (!ladder.from_verdict) {  // a verdict has timed the rivals already
      RETURN_IF_ERROR(PreferFaster(imported, batch, position, bucket_config, cache, pipeline,
                                   m.check, rows ? &*rows : nullptr, m.times, r));
    }
    // The ladder's verdict: where the first bucket settled, which every later one starts at.
    if (position == 0) {
      settled = {pipeline.precision, pipeline.int8_noise_kept, m.check.precision_message,
                 pipeline.calibration};
    }
    precision_by_bucket[batch] = BucketPrecision(*r.engine, pipeline.precision);
    auto& instances = m.engines[batch];
    // Further instances take the layout and thread count the first one settled on (tuned
    // once, and alike).
    const std::string& chosen = r.engine->info().layout;
    const std::string layout = chosen.empty() ? config.cpu_layout : chosen;
    const runtime::EngineInfo& first = r.engine->info();
    const int threads = first.max_threads > 0 ? first.max_threads : CpuBuildThreads(config);
    const int run_threads = first.threads < threads ? first.threads : 0;  // built wide
    for (int i = 1; i < config.instances; ++i) {
      ASSIGN_OR_RETURN(auto extra, BuildEngine(config.device, layout, threads, false, r.compiled,
                                               true, config.cpu_winograd, run_threads));
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
  m.check.precision = PrecisionOf(precision_by_bucket);
  if (ladder.verdict_key && !ladder.from_verdict) StoreVerdict(cache, *ladder.verdict_key, settled);
  m.calibration = pipeline.calibration;
  m.int8_noise_kept = pipeline.int8_noise_kept;
  MarkDynamicDims(model, config, std::move(dynamic), m.signature);
  if (m.signature.dynamic() && config.shape_classes == "auto") ProveClasses(model, config, m);
  return m;
}

absl::StatusOr<std::vector<std::unique_ptr<runtime::Engine>>> BuildShapeEngines(
    const Graph& model, const ModelConfig& config, const BuiltModel& base,
    const std::map<std::string, int64_t>& dims, int64_t bucket, bool check) {
  const ModelConfig c = ShapeBuildConfig(config, base, dims, bucket, check);
  ASSIGN_OR_RETURN(BuiltModel m, BuildModel(model, c, nullptr, {}, base.fold_cache));
  if (m.engines.empty() || m.engines.begin()->second.empty()) {
    return absl::InternalError("the shape's build made no engine");
  }
  return std::move(m.engines.begin()->second);
}

absl::StatusOr<std::unique_ptr<runtime::Engine>> BuildShapeEngine(
    const Graph& model, const ModelConfig& config, const BuiltModel& base,
    const std::map<std::string, int64_t>& dims, int64_t bucket, bool check) {
  ModelConfig one = config;
  one.instances = 1;
  ASSIGN_OR_RETURN(auto engines, BuildShapeEngines(model, one, base, dims, bucket, check));
  return std::move(engines[0]);
}

}  // namespace kiln::server

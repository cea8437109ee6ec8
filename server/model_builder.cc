#include "server/model_builder.h"

#include <spdlog/spdlog.h>

#include <optional>

#include "absl/strings/str_join.h"
#include "compiler/compile.h"
#include "compiler/onnx/exporter.h"
#include "compiler/onnx/importer.h"
#include "compiler/plan/memory_plan.h"
#include "compiler/shape/infer.h"
#include "runtime/check/differential.h"
#include "runtime/reference/interpreter.h"
#include "server/engine_factory.h"
#include "server/metrics/kiln_metrics.h"

namespace kiln::server {
namespace {

constexpr int kMaxBisections = 4;  // each disables one pass; more means something else is wrong

check::InputRanges RangesOf(const WarmupConfig& w) {
  check::InputRanges r;
  r.seed = w.seed;
  r.float_lo = w.float_lo;
  r.float_hi = w.float_hi;
  r.int_lo = w.int_lo;
  r.int_hi = w.int_hi;
  r.per_input = w.input_ranges;
  return r;
}

// Runs `engine` on `feed` and compares with `want` (the raw graph's outputs).
absl::StatusOr<check::Divergence> CheckEngine(runtime::Engine& engine, const ref::TensorMap& feed,
                                              const ref::TensorMap& want,
                                              const check::Tolerance& tol) {
  std::vector<Tensor> in, out;
  for (const runtime::TensorSpec& s : engine.inputs()) in.push_back(feed.at(s.name));
  RETURN_IF_ERROR(engine.Run(in, out));
  ref::TensorMap got;
  for (size_t i = 0; i < out.size(); ++i) got.emplace(engine.outputs()[i].name, out[i]);
  return check::CompareOutputs(want, got, tol);
}

struct BucketResult {
  CompiledGraph compiled;
  std::unique_ptr<runtime::Engine> engine;
  std::string report_json;
};

}  // namespace

EngineCacheKey CacheKeyFor(const CacheContext& cache, const ModelConfig& config,
                      const PipelineOptions& pipeline, int64_t batch) {
  const WarmupConfig& w = config.warmup;
  std::string warmup = "off";
  if (w.enabled) {
    warmup = absl::StrCat(w.seed, ",", w.rtol, ",", w.atol, ",", w.float_lo, ",", w.float_hi, ",",
                          w.int_lo, ",", w.int_hi);
    for (const auto& [name, r] : w.input_ranges) {
      absl::StrAppend(&warmup, ",", name, ":", r.first, ":", r.second);
    }
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

// A bucket's first engine instance. An explicit cpu_threads is taken as given; the default
// (cores divided among instances) may settle on one thread for a small engine.
absl::StatusOr<std::unique_ptr<runtime::Engine>> FirstEngine(const ModelConfig& config,
                                                             const std::string& layout,
                                                             const CompiledGraph& compiled) {
  return BuildEngine(config.device, layout, CpuThreadsPerInstance(config),
                     /*tune_threads=*/config.cpu_threads == 0, compiled);
}

// Rebuilds the engine from a cache entry and re-verifies it: one run on the seeded warm-up
// inputs against the reference outputs stored with it (the reference run is what a hit
// saves). Any failure means the entry is not used.
absl::StatusOr<BucketResult> FromCache(const EngineCacheEntry& e, const ModelConfig& config,
                                       const ref::TensorMap& feed, const check::Tolerance& tol) {
  onnx_io::ImportOptions options;
  options.normalize = false;  // the graph was normalized before it was optimized
  BucketResult r;
  ASSIGN_OR_RETURN(r.compiled.graph, onnx_io::ImportModelBytes(e.graph_onnx, options));
  ASSIGN_OR_RETURN(r.compiled.plan, plan::PlanMemory(*r.compiled.graph, plan::PlanOptions{}));
  // A tuned layout is reused (the measurement was made for this model, batch and CPU).
  const bool reuse = config.cpu_layout == "tune" && !e.engine_layout.empty();
  ASSIGN_OR_RETURN(r.engine,
                   FirstEngine(config, reuse ? e.engine_layout : config.cpu_layout, r.compiled));
  r.report_json = e.report_json;
  if (!config.warmup.enabled) return r;
  if (!e.checked) return absl::DataLossError("the entry has no reference outputs");
  ref::TensorMap want(e.outputs.begin(), e.outputs.end());
  ASSIGN_OR_RETURN(check::Divergence d, CheckEngine(*r.engine, feed, want, tol));
  if (!d.ok) return absl::DataLossError("re-verification failed: " + d.message);
  return r;
}

// Compile + build + check for one bucket, bisecting and disabling passes on a mismatch.
// `pipeline.disabled` grows with the passes the bisection names (shared by later buckets).
absl::StatusOr<BucketResult> CompileAndCheck(const Graph& imported, const Graph& raw,
                                             int64_t batch, const ModelConfig& config,
                                             const ref::TensorMap& feed, const ref::TensorMap& want,
                                             PipelineOptions& pipeline, CheckSummary& check) {
  const check::Tolerance tol{config.warmup.rtol, config.warmup.atol};
  for (int attempt = 0;; ++attempt) {
    BucketResult r;
    CompileOptions options;
    options.batch = batch;
    options.pipeline = pipeline;
    ASSIGN_OR_RETURN(r.compiled, CompileGraph(imported, options));
    ASSIGN_OR_RETURN(r.engine, FirstEngine(config, config.cpu_layout, r.compiled));
    r.report_json = r.compiled.report.ToJson();
    if (!config.warmup.enabled) return r;
    check.ran = true;
    ASSIGN_OR_RETURN(check::Divergence d, CheckEngine(*r.engine, feed, want, tol));
    check.max_abs_err = std::max(check.max_abs_err, d.max_abs_err);
    check.max_rel_err = std::max(check.max_rel_err, d.max_rel_err);
    if (d.ok) return r;
    const std::string where = absl::StrCat("batch ", batch, ": ", d.message);
    ASSIGN_OR_RETURN(check::BisectResult b, check::BisectPipeline(raw, pipeline, feed, tol));
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
  auto proto = onnx_io::ExportModel(*r.compiled.graph);
  if (!proto.ok()) return std::nullopt;
  e.graph_onnx = proto->SerializeAsString();
  e.report_json = r.report_json;
  e.disabled_passes = check.disabled_passes;
  e.check_message = check.message;
  e.max_abs_err = check.max_abs_err;
  e.max_rel_err = check.max_rel_err;
  e.checked = config.warmup.enabled;
  e.engine_layout = r.engine->info().layout;
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

// One bucket: from the cache when it holds a verified entry, else compiled and checked (and
// then stored).
absl::StatusOr<BucketResult> BuildBucket(const Graph& imported, int64_t batch,
                                         const ModelConfig& config, const CacheContext& cache,
                                         PipelineOptions& pipeline, CheckSummary& check) {
  std::unique_ptr<Graph> raw = imported.Clone();
  RETURN_IF_ERROR(shape::Specialize(*raw, batch));
  ref::TensorMap feed, want;
  if (config.warmup.enabled) {
    ASSIGN_OR_RETURN(feed, check::RandomInputs(*raw, RangesOf(config.warmup)));
  }
  EngineCacheKey key;
  if (cache.cache) {
    key = CacheKeyFor(cache, config, pipeline, batch);
    if (auto e = cache.cache->Lookup(key)) {
      const check::Tolerance tol{config.warmup.rtol, config.warmup.atol};
      auto r = FromCache(*e, config, feed, tol);
      if (r.ok()) {
        MergeCachedCheck(*e, pipeline, check);
        metrics::EngineCacheResult(/*hit=*/true);
        return r;
      }
      spdlog::warn("engine cache: batch {}: {}; rebuilding", batch,
                   std::string(r.status().message()));
      cache.cache->Invalidate(key);
    }
  }
  // A miss (no entry, or one that failed its re-verification) is counted once per bucket.
  if (cache.cache) metrics::EngineCacheResult(/*hit=*/false);
  if (config.warmup.enabled) {
    ASSIGN_OR_RETURN(want, ref::Run(*raw, feed));
  }
  ASSIGN_OR_RETURN(BucketResult r,
                   CompileAndCheck(imported, *raw, batch, config, feed, want, pipeline, check));
  if (cache.cache) {
    std::optional<EngineCacheEntry> e = EntryFor(r, check, config, want);
    absl::Status s = e ? cache.cache->Store(key, std::move(*e)) : absl::OkStatus();
    if (!s.ok()) spdlog::warn("{}", std::string(s.message()));
  }
  return r;
}

}  // namespace

shape::InputDims InputDimsOf(const ModelConfig& config) {
  shape::InputDims dims;
  dims.shapes = config.input_shapes;
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

absl::StatusOr<BuiltModel> BuildModel(const Graph& model, const ModelConfig& config,
                                      const ProgressFn& progress, const CacheContext& cache) {
  BuiltModel m;
  // The config's input_shapes fix symbolic dims other than the batch (a sequence length):
  // from here on the model is the one with those sizes.
  std::unique_ptr<Graph> bound = model.Clone();
  RETURN_IF_ERROR(shape::BindInputDims(*bound, InputDimsOf(config)));
  const Graph& imported = *bound;
  ASSIGN_OR_RETURN(m.signature, SignatureOf(imported, config));
  m.buckets = m.signature.batchable ? config.batch_buckets : std::vector<int64_t>{1};
  PipelineOptions pipeline;
  pipeline.level = config.opt_level;
  pipeline.disabled = config.disabled_passes;
  m.check.ok = true;
  for (int64_t batch : m.buckets) {
    if (progress) progress(absl::StrCat("compiling and checking batch ", batch));
    ASSIGN_OR_RETURN(BucketResult r, BuildBucket(imported, batch, config, cache, pipeline, m.check));
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
    m.signature.outputs.push_back(std::move(s));
  }
  return m;
}

}  // namespace kiln::server

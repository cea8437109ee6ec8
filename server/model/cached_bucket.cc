#include "server/model/cached_bucket.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_join.h"
#include "base/elapsed.h"
#include "compiler/onnx/exporter.h"
#include "server/model/bound_inputs.h"
#include "server/model/bucket_engines.h"
#include "server/model/cache_mask.h"
#include "server/model/engine_factory.h"
#include "server/model/precision.h"
#include "server/model/warmup_check.h"

namespace kiln::server {
namespace {

using Clock = std::chrono::steady_clock;
using Threads = EngineCacheEntry::Threads;

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
  key.options = absl::StrCat("O", static_cast<int>(pipeline.level),
                             ";passes=", absl::StrJoin(PipelinePasses(pipeline.level), ","),
                             ";disabled=", absl::StrJoin(pipeline.disabled, ","),
                             ";precision=", PrecisionKey(config, pipeline), ";warmup=", warmup,
                             ";inputs=", InputDimsOf(config).ToString(),
                             ";bound=", BoundInputsKey(config), ";", CacheMaskKey(config));
  key.device = DeviceFingerprint(config.device);
  key.batch = batch;
  return key;
}

absl::StatusOr<BucketResult> FromCache(const EngineCacheEntry& e, const ModelConfig& config,
                                       const PipelineOptions& pipeline, const Graph& raw,
                                       int64_t checked_block, const ref::TensorMap& feed,
                                       const check::Tolerance& tol, LoadTimes& times,
                                       std::optional<PreparedBucket>& prepared) {
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
    WithinBudget(config, pipeline, *d);
    if (!d->ok) return absl::DataLossError("re-verification failed: " + d->message);
  }
  if (ahead) ++times.built_ahead;
  return r;
}

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
  e.norm_rel_err = check.norm_rel_err;
  e.checked = config.warmup.enabled;
  e.engine_layout = r.engine->info().layout;
  if (config.cpu_threads == 0) {  // FirstEngine measured one thread against the team
    const bool one = r.engine->info().max_threads == 1 && CpuBuildThreads(config) > 1;
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
  check.norm_rel_err = std::max(check.norm_rel_err, e.norm_rel_err);
  for (const std::string& p : e.disabled_passes) {
    pipeline.disabled.insert(p);
    check.disabled_passes.insert(p);
  }
  if (!e.check_message.empty()) check.message = e.check_message;
}

}  // namespace kiln::server

#include "server/model/bucket_engines.h"

#include <chrono>
#include <map>
#include <mutex>

#include "base/elapsed.h"
#include "compiler/onnx/importer.h"
#include "compiler/plan/memory_plan.h"
#include "server/model/engine_factory.h"

namespace kiln::server {

using Clock = std::chrono::steady_clock;
using Threads = EngineCacheEntry::Threads;

absl::StatusOr<std::unique_ptr<runtime::Engine>> FirstEngine(const ModelConfig& config,
                                                             const std::string& layout,
                                                             const CompiledGraph& compiled,
                                                             Threads tuned) {
  int threads = CpuBuildThreads(config);
  bool tune_threads = config.cpu_threads == 0;
  if (tune_threads && tuned != Threads::kNotTuned) {
    tune_threads = false;
    if (tuned == Threads::kOne) threads = 1;
  }
  // The warm-up check's first run (right after the build) is the engine's warm-up, and a
  // second one would only cost time (ResNet-50: one more inference per bucket; ViT-L/16 at
  // AVX2: ~8 s at batch 8). Tuning warms the candidates it times itself (tune.cc).
  const bool warm_up = !config.warmup.enabled;
  const int run_threads = config.cpu_wide_runs ? CpuThreadsPerInstance(config) : 0;
  return BuildEngine(config.device, layout, threads, tune_threads, compiled, warm_up,
                     config.cpu_winograd, run_threads);
}

ModelConfig ShapeBuildConfig(const ModelConfig& config, const BuiltModel& base,
                             const std::map<std::string, int64_t>& dims, int64_t bucket,
                             bool check) {
  ModelConfig c = config;
  c.dynamic_dims = dims;
  c.dynamic_dim_ranges = base.signature.dim_ranges;  // known: no probing per shape
  c.batch_buckets = {bucket};
  c.max_batch_size = bucket;
  c.shape_classes = "off";                   // proven (or refused) once, by the model's own build
  c.precision.start = base.check.precision;  // the model's check's verdict
  c.precision.calibration = base.calibration;
  c.precision.int8_noise_kept = base.int8_noise_kept;
  if (!check) c.warmup.enabled = false;
  c.disabled_passes.insert(base.check.disabled_passes.begin(), base.check.disabled_passes.end());
  if (!base.engines.empty() && !base.engines.begin()->second.empty()) {
    const runtime::EngineInfo& first = base.engines.begin()->second[0]->info();
    if (c.cpu_layout == "tune" && !first.layout.empty()) c.cpu_layout = first.layout;
    if (c.cpu_threads == 0 && first.threads > 0) c.cpu_threads = first.threads;
    // Built wide where the first engine was (ApplyWideRuns decided it at the model's load;
    // not where that engine settled on one thread or could not change its team per run).
    c.cpu_wide_runs = first.max_threads > first.threads;
  }
  return c;
}

std::string LayoutFor(const EngineCacheEntry& e, const ModelConfig& config) {
  return config.cpu_layout == "tune" && !e.engine_layout.empty() ? e.engine_layout
                                                                 : config.cpu_layout;
}

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

std::vector<int64_t> BuildOrder(const std::vector<int64_t>& buckets) {
  if (buckets.size() <= 2) return buckets;
  std::vector<int64_t> order = {buckets.front(), buckets.back()};
  order.insert(order.end(), buckets.begin() + 1, buckets.end() - 1);
  return order;
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

}  // namespace kiln::server

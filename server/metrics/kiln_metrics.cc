#include "server/metrics/kiln_metrics.h"

#include <fstream>
#include <sstream>

#include "base/memory_budget.h"
#include "server/model_builder.h"
#include "server/model_registry.h"

namespace kiln::server::metrics {
namespace {

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// Engine batch sizes are small powers of two in practice; rows per batch fall in these.
std::vector<double> BatchSizeBuckets() { return {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}; }

// Compiling a model takes milliseconds (an MLP) to minutes (a large CNN on every bucket).
std::vector<double> CompileBuckets() {
  return {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500};
}

// Every family kilnd exports, registered together so each shows up (HELP/TYPE, and unlabeled
// ones at 0) from the first scrape.
struct Families {
  explicit Families(Registry& r)
      : request_duration(r.AddHistogram("kiln_request_duration_seconds",
                                        "Inference RPC latency, from arrival to response.",
                                        {"model", "method"}, LatencyBuckets())),
        queue_duration(r.AddHistogram("kiln_queue_duration_seconds",
                                      "Time a request waited in the batcher's queue.", {"model"},
                                      LatencyBuckets())),
        compute_duration(r.AddHistogram("kiln_compute_duration_seconds",
                                        "Engine run time of one batch, by engine batch size.",
                                        {"model", "batch"}, LatencyBuckets())),
        batch_size(r.AddHistogram("kiln_batch_size",
                                  "Request rows per executed batch (before padding).", {"model"},
                                  BatchSizeBuckets())),
        compile_duration(
            r.AddHistogram("kiln_compile_duration_seconds",
                           "Time to build a model version: compile, engines and warm-up check.",
                           {"model"}, CompileBuckets())),
        requests(r.AddCounter("kiln_requests_total", "Inference RPCs by gRPC status code.",
                              {"model", "method", "code"})),
        checks(r.AddCounter("kiln_differential_checks_total",
                            "Warm-up differential checks of built models, by outcome.",
                            {"model", "outcome"})),
        cache(r.AddCounter("kiln_engine_cache_requests_total", "Engine cache lookups, by result.",
                           {"result"})),
        shape_build(r.AddHistogram(
            "kiln_shape_engine_build_seconds",
            "Time to build a dynamic model's engine for a new shape: compile, engine, check.",
            {"model"}, CompileBuckets())),
        shape_requests(r.AddCounter("kiln_shape_engine_requests_total",
                                    "Requests of a dynamic model at a shape other than its "
                                    "warm-up one, by whether the shape had an engine entry.",
                                    {"model", "result"})),
        shape_evictions(r.AddCounter("kiln_shape_engine_evictions_total",
                                     "Shapes dropped from a dynamic model's LRU "
                                     "(max_shape_engines).",
                                     {"model"})),
        inflight(r.AddGauge("kiln_inflight_requests", "Inference RPCs being handled now.")),
        queue_depth(
            r.AddGauge("kiln_queue_depth", "Requests waiting in the batcher's queue.", {"model"})) {
    cache.WithLabels({"hit"});  // both results visible at 0 before the first lookup
    cache.WithLabels({"miss"});
  }
  HistogramFamily &request_duration, &queue_duration, &compute_duration, &batch_size,
      &compile_duration;
  CounterFamily &requests, &checks, &cache;
  HistogramFamily& shape_build;
  CounterFamily &shape_requests, &shape_evictions;
  GaugeFamily &inflight, &queue_depth;
};

Families& F() {
  static Families* f = new Families(Default());  // never destroyed: used by detached threads
  return *f;
}

// kiln_models{state}, kiln_engine_arena_bytes{model,device,batch} and
// kiln_process_resident_memory_bytes, from the registry as it is now.
std::string RenderScrapeGauges(const ModelRegistry& registry) {
  Registry r;
  auto& models = r.AddGauge("kiln_models", "Loaded model versions, by state.", {"state"});
  auto& arena = r.AddGauge("kiln_engine_arena_bytes",
                           "Activation arena bytes of READY engines (summed over instances "
                           "and versions).",
                           {"model", "device", "batch"});
  r.AddGauge("kiln_process_resident_memory_bytes", "Resident set size of kilnd (VmRSS).")
      .Get()
      .Set(static_cast<double>(ResidentMemoryBytes()));
  r.AddGauge("kiln_memory_budget_bytes",
             "The memory budget (server.memory_budget_bytes): what kilnd's tensors may take.")
      .Get()
      .Set(static_cast<double>(ProcessMemory()->cap()));
  r.AddGauge("kiln_memory_budget_used_bytes",
             "Tensor bytes charged to the memory budget now (weights, builds, requests).")
      .Get()
      .Set(static_cast<double>(ProcessMemory()->used()));
  for (ModelState s : {ModelState::kLoading, ModelState::kReady, ModelState::kFailed}) {
    models.WithLabels({ModelStateName(s)});
  }
  for (const auto& mv : registry.List()) {
    const ModelState state = mv->state();
    models.WithLabels({ModelStateName(state)}).Inc();
    if (state != ModelState::kReady) continue;  // built() is only valid once READY
    for (const auto& [batch, engines] : mv->built().engines) {
      for (const auto& e : engines) {
        arena.WithLabels({mv->name(), e->info().device, std::to_string(batch)})
            .Inc(static_cast<double>(e->info().arena_bytes));
      }
    }
  }
  return r.Render();
}

}  // namespace

Registry& Default() {
  static Registry* r = new Registry();  // never destroyed, like F()
  return *r;
}

BatcherMetrics::BatcherMetrics(const std::string& model, const std::vector<int64_t>& buckets)
    : model_(model),
      queue_depth_(&F().queue_depth.WithLabels({model})),
      queue_duration_(&F().queue_duration.WithLabels({model})),
      batch_size_(&F().batch_size.WithLabels({model})) {
  for (int64_t b : buckets) {
    compute_[b] = &F().compute_duration.WithLabels({model, std::to_string(b)});
  }
}

Histogram& BatcherMetrics::compute_duration(int64_t batch) {
  auto it = compute_.find(batch);
  if (it != compute_.end()) return *it->second;
  return F().compute_duration.WithLabels({model_, std::to_string(batch)});
}

InflightRequest::InflightRequest() { F().inflight.Get().Inc(); }
InflightRequest::~InflightRequest() { F().inflight.Get().Dec(); }

void RecordRequest(const std::string& model, const char* method, absl::StatusCode code,
                   std::chrono::steady_clock::duration elapsed) {
  F().requests.WithLabels({model, method, absl::StatusCodeToString(code)}).Inc();
  F().request_duration.WithLabels({model, method}).Observe(Seconds(elapsed));
}

void RecordModelBuild(const std::string& model, const CheckSummary* check,
                      const absl::Status& status, std::chrono::steady_clock::time_point start) {
  F().compile_duration.WithLabels({model}).Observe(
      Seconds(std::chrono::steady_clock::now() - start));
  const char* outcome = nullptr;
  if (check != nullptr && check->ran) {
    outcome = !check->nonfinite_ok              ? "pass_finite_only"
              : check->disabled_passes.empty() ? "pass"
                                               : "pass_after_bisect";
  } else if (check == nullptr && status.code() == absl::StatusCode::kFailedPrecondition) {
    outcome = "fail";
  }
  if (outcome != nullptr) F().checks.WithLabels({model, outcome}).Inc();
}

void ShapeEngineLookup(const std::string& model, bool hit) {
  F().shape_requests.WithLabels({model, hit ? "hit" : "miss"}).Inc();
}

void ShapeEngineEvicted(const std::string& model) {
  F().shape_evictions.WithLabels({model}).Inc();
}

void ShapeEngineBuilt(const std::string& model, double seconds) {
  F().shape_build.WithLabels({model}).Observe(seconds);
}

void EngineCacheResult(bool hit) { F().cache.WithLabels({hit ? "hit" : "miss"}).Inc(); }

int64_t ResidentMemoryBytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) != 0) continue;
    std::istringstream fields(line.substr(6));
    int64_t kib = 0;
    fields >> kib;  // "VmRSS:   12345 kB"
    return kib * 1024;
  }
  return 0;
}

std::string RenderAll(const ModelRegistry& registry) {
  F();  // registers every family even before the first request
  return Default().Render() + RenderScrapeGauges(registry);
}

}  // namespace kiln::server::metrics

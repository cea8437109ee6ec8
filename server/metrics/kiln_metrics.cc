#include "server/metrics/kiln_metrics.h"

#include <prometheus/text_serializer.h>

#include <fstream>
#include <sstream>
#include <type_traits>

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

// A prometheus-cpp family with positional label values (in the order of `names`), so call
// sites read as the README's table does. prometheus-cpp keys children by a name -> value
// map; Add returns the existing child for labels it has seen, so a handle looked up once
// (BatcherMetrics) stays valid and the hot path is the child's own update.
template <class T>
class Labeled {
 public:
  Labeled(prometheus::Family<T>& family, std::vector<std::string> names,
          std::vector<double> bounds = {})
      : family_(family), names_(std::move(names)), bounds_(std::move(bounds)) {}
  // A wrong number of values is padded with "" or truncated rather than failing a request.
  T& With(const std::vector<std::string>& values) {
    prometheus::Labels labels;
    for (size_t i = 0; i < names_.size(); ++i) labels[names_[i]] = i < values.size() ? values[i] : "";
    if constexpr (std::is_same_v<T, Histogram>) {
      return family_.Add(labels, bounds_);
    } else {
      return family_.Add(labels);
    }
  }
  T& Get() { return With({}); }

 private:
  prometheus::Family<T>& family_;
  const std::vector<std::string> names_;
  const std::vector<double> bounds_;
};

Labeled<Histogram> AddHistogram(prometheus::Registry& r, const std::string& name,
                                const std::string& help, std::vector<std::string> labels,
                                std::vector<double> bounds) {
  return {prometheus::BuildHistogram().Name(name).Help(help).Register(r), std::move(labels),
          std::move(bounds)};
}
Labeled<Counter> AddCounter(prometheus::Registry& r, const std::string& name,
                            const std::string& help, std::vector<std::string> labels) {
  return {prometheus::BuildCounter().Name(name).Help(help).Register(r), std::move(labels)};
}
Labeled<Gauge> AddGauge(prometheus::Registry& r, const std::string& name, const std::string& help,
                        std::vector<std::string> labels = {}) {
  return {prometheus::BuildGauge().Name(name).Help(help).Register(r), std::move(labels)};
}

// Every family kilnd exports, registered together: unlabeled ones (and the cache's two
// results) show at 0 from the first scrape, labeled ones once they have a series.
struct Families {
  explicit Families(prometheus::Registry& r)
      : request_duration(AddHistogram(r, "kiln_request_duration_seconds",
                                      "Inference RPC latency, from arrival to response.",
                                      {"model", "method"}, LatencyBuckets())),
        queue_duration(AddHistogram(r, "kiln_queue_duration_seconds",
                                    "Time a request waited in the batcher's queue.", {"model"},
                                    LatencyBuckets())),
        compute_duration(AddHistogram(r, "kiln_compute_duration_seconds",
                                      "Engine run time of one batch, by engine batch size.",
                                      {"model", "batch"}, LatencyBuckets())),
        batch_size(AddHistogram(r, "kiln_batch_size",
                                "Request rows per executed batch (before padding).", {"model"},
                                BatchSizeBuckets())),
        compile_duration(
            AddHistogram(r, "kiln_compile_duration_seconds",
                         "Time to build a model version: compile, engines and warm-up check.",
                         {"model"}, CompileBuckets())),
        requests(AddCounter(r, "kiln_requests_total", "Inference RPCs by gRPC status code.",
                            {"model", "method", "code"})),
        checks(AddCounter(r, "kiln_differential_checks_total",
                          "Warm-up differential checks of built models, by outcome.",
                          {"model", "outcome"})),
        cache(AddCounter(r, "kiln_engine_cache_requests_total", "Engine cache lookups, by result.",
                         {"result"})),
        shape_build(AddHistogram(
            r, "kiln_shape_engine_build_seconds",
            "Time to build a dynamic model's engine for a new shape: compile, engine, check.",
            {"model"}, CompileBuckets())),
        shape_requests(AddCounter(r, "kiln_shape_engine_requests_total",
                                  "Requests of a dynamic model at a shape other than its "
                                  "warm-up one, by whether the shape had an engine entry.",
                                  {"model", "result"})),
        shape_evictions(AddCounter(r, "kiln_shape_engine_evictions_total",
                                   "Shapes dropped from a dynamic model's LRU "
                                   "(max_shape_engines).",
                                   {"model"})),
        inflight(AddGauge(r, "kiln_inflight_requests", "Inference RPCs being handled now.")),
        queue_depth(
            AddGauge(r, "kiln_queue_depth", "Requests waiting in the batcher's queue.", {"model"})) {
    cache.With({"hit"});  // both results visible at 0 before the first lookup
    cache.With({"miss"});
    inflight.Get();
  }
  Labeled<Histogram> request_duration, queue_duration, compute_duration, batch_size,
      compile_duration;
  Labeled<Counter> requests, checks, cache;
  Labeled<Histogram> shape_build;
  Labeled<Counter> shape_requests, shape_evictions;
  Labeled<Gauge> inflight, queue_depth;
};

std::string Serialize(const prometheus::Registry& r) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, r.Collect());
  return out.str();
}

prometheus::Registry& Raw() {
  static auto* r = new prometheus::Registry();  // never destroyed, like F()
  return *r;
}

Families& F() {
  static Families* f = new Families(Raw());  // never destroyed: used by detached threads
  return *f;
}

// kiln_models{state}, kiln_engine_arena_bytes{model,device,batch} and
// kiln_process_resident_memory_bytes, from the registry as it is now.
std::string RenderScrapeGauges(const ModelRegistry& registry) {
  prometheus::Registry r;
  Labeled<Gauge> models = AddGauge(r, "kiln_models", "Loaded model versions, by state.", {"state"});
  Labeled<Gauge> arena = AddGauge(r, "kiln_engine_arena_bytes",
                                  "Activation arena bytes of READY engines (summed over instances "
                                  "and versions).",
                                  {"model", "device", "batch"});
  AddGauge(r, "kiln_process_resident_memory_bytes", "Resident set size of kilnd (VmRSS).")
      .Get()
      .Set(static_cast<double>(ResidentMemoryBytes()));
  AddGauge(r, "kiln_memory_budget_bytes",
           "The memory budget (server.memory_budget_bytes): what kilnd's tensors may take.")
      .Get()
      .Set(static_cast<double>(ProcessMemory()->cap()));
  AddGauge(r, "kiln_memory_budget_used_bytes",
           "Tensor bytes charged to the memory budget now (weights, builds, requests).")
      .Get()
      .Set(static_cast<double>(ProcessMemory()->used()));
  Labeled<Gauge> sequences = AddGauge(r, "kiln_generation_sequences",
                                      "Generation requests running (in the kv cache) and waiting.",
                                      {"model", "state"});
  Labeled<Gauge> pages = AddGauge(r, "kiln_kv_cache_pages",
                                  "Pages of the generation kv cache, used and free.",
                                  {"model", "state"});
  for (ModelState s : {ModelState::kLoading, ModelState::kReady, ModelState::kFailed}) {
    models.With({ModelStateName(s)});
  }
  for (const auto& mv : registry.List()) {
    const ModelState state = mv->state();
    models.With({ModelStateName(state)}).Increment();
    if (state != ModelState::kReady) continue;  // built() is only valid once READY
    if (const generate::Generator* g = mv->generator()) {
      const generate::GeneratorStats st = g->stats();
      sequences.With({mv->name(), "running"}).Increment(static_cast<double>(st.running));
      sequences.With({mv->name(), "waiting"}).Increment(static_cast<double>(st.waiting));
      pages.With({mv->name(), "used"}).Increment(static_cast<double>(st.pages_total - st.pages_free));
      pages.With({mv->name(), "free"}).Increment(static_cast<double>(st.pages_free));
    }
    for (const auto& [batch, engines] : mv->built().engines) {
      for (const auto& e : engines) {
        arena.With({mv->name(), e->info().device, std::to_string(batch)})
            .Increment(static_cast<double>(e->info().arena_bytes));
      }
    }
  }
  return Serialize(r);
}

}  // namespace

const std::vector<double>& LatencyBuckets() {
  static const std::vector<double> b = {50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3,
                                        5e-3,  10e-3,  25e-3,  50e-3,  0.1,  0.25,
                                        0.5,   1,      2.5,    5,      10};
  return b;
}

prometheus::Registry& Default() {
  F();  // every family registered before anyone reads the registry
  return Raw();
}

BatcherMetrics::BatcherMetrics(const std::string& model, const std::vector<int64_t>& buckets)
    : model_(model),
      queue_depth_(&F().queue_depth.With({model})),
      queue_duration_(&F().queue_duration.With({model})),
      batch_size_(&F().batch_size.With({model})) {
  for (int64_t b : buckets) {
    compute_[b] = &F().compute_duration.With({model, std::to_string(b)});
  }
}

Histogram& BatcherMetrics::compute_duration(int64_t batch) {
  auto it = compute_.find(batch);
  if (it != compute_.end()) return *it->second;
  return F().compute_duration.With({model_, std::to_string(batch)});
}

InflightRequest::InflightRequest() { F().inflight.Get().Increment(); }
InflightRequest::~InflightRequest() { F().inflight.Get().Decrement(); }

void RecordRequest(const std::string& model, const char* method, absl::StatusCode code,
                   std::chrono::steady_clock::duration elapsed) {
  F().requests.With({model, method, absl::StatusCodeToString(code)}).Increment();
  F().request_duration.With({model, method}).Observe(Seconds(elapsed));
}

void RecordModelBuild(const std::string& model, const CheckSummary* check,
                      const absl::Status& status, std::chrono::steady_clock::time_point start) {
  F().compile_duration.With({model}).Observe(
      Seconds(std::chrono::steady_clock::now() - start));
  const char* outcome = nullptr;
  if (check != nullptr && check->ran) {
    outcome = !check->nonfinite_ok              ? "pass_finite_only"
              : check->disabled_passes.empty() ? "pass"
                                               : "pass_after_bisect";
  } else if (check == nullptr && status.code() == absl::StatusCode::kFailedPrecondition) {
    outcome = "fail";
  }
  if (outcome != nullptr) F().checks.With({model, outcome}).Increment();
}

void ShapeEngineLookup(const std::string& model, bool hit) {
  F().shape_requests.With({model, hit ? "hit" : "miss"}).Increment();
}

void ShapeEngineEvicted(const std::string& model) {
  F().shape_evictions.With({model}).Increment();
}

void ShapeEngineBuilt(const std::string& model, double seconds) {
  F().shape_build.With({model}).Observe(seconds);
}

void EngineCacheResult(bool hit) { F().cache.With({hit ? "hit" : "miss"}).Increment(); }

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
  return Serialize(Default()) + RenderScrapeGauges(registry);
}

}  // namespace kiln::server::metrics

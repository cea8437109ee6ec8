#include "server/metrics/kiln_metrics.h"

#include <prometheus/text_serializer.h>

#include <fstream>
#include <sstream>
#include <type_traits>

#include "server/metrics/labeled.h"

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

prometheus::Registry& Raw() {
  static auto* r = new prometheus::Registry();  // never destroyed, like F()
  return *r;
}

Families& F() {
  static Families* f = new Families(Raw());  // never destroyed: used by detached threads
  return *f;
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

void RecordModelBuild(const std::string& model, const char* check_outcome,
                      std::chrono::steady_clock::time_point start) {
  F().compile_duration.With({model}).Observe(
      Seconds(std::chrono::steady_clock::now() - start));
  if (check_outcome != nullptr) F().checks.With({model, check_outcome}).Increment();
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

std::string Serialize(const prometheus::Registry& r) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, r.Collect());
  return out.str();
}

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

}  // namespace kiln::server::metrics

// Kiln's own metrics: every family kilnd exports, registered once in the process-wide
// registry, plus the small hooks the server calls. The full list, with labels and meaning,
// is in README.md ("Metrics"). Scrape-time gauges (model states, engine arenas, resident
// memory) are computed from the model registry when /metrics is served, so they never drift
// from the truth on unload: server/serving/scrape_metrics.h, above the models they read.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace kiln::server::metrics {

using prometheus::Counter;
using prometheus::Gauge;
using prometheus::Histogram;

// The Content-Type of RenderAll's output (the text exposition format 0.0.4).
inline constexpr char kContentType[] = "text/plain; version=0.0.4; charset=utf-8";

// 50us .. 10s in 1-2.5-5 steps (x2 to x2.5): request, queue and compute latencies.
const std::vector<double>& LatencyBuckets();

// The process-wide prometheus-cpp registry every kiln_* family lives in.
prometheus::Registry& Default();

// The handles one batcher uses, looked up once when it starts (model label fixed).
class BatcherMetrics {
 public:
  BatcherMetrics(const std::string& model, const std::vector<int64_t>& buckets);
  Gauge& queue_depth() { return *queue_depth_; }
  Histogram& queue_duration() { return *queue_duration_; }
  Histogram& batch_size() { return *batch_size_; }
  // kiln_compute_duration_seconds{model,batch}; known buckets are pre-resolved.
  Histogram& compute_duration(int64_t batch);

 private:
  std::string model_;
  Gauge* queue_depth_;
  Histogram* queue_duration_;
  Histogram* batch_size_;
  std::map<int64_t, Histogram*> compute_;  // written only by the constructor
};

// Marks one inference RPC in flight (kiln_inflight_requests) for its lifetime.
class InflightRequest {
 public:
  InflightRequest();
  ~InflightRequest();
  InflightRequest(const InflightRequest&) = delete;
  InflightRequest& operator=(const InflightRequest&) = delete;
};

// One finished inference RPC: kiln_requests_total and kiln_request_duration_seconds.
// `model` must be a loaded model's name or "" (client-chosen names would make the series
// unbounded).
void RecordRequest(const std::string& model, const char* method, absl::StatusCode code,
                   std::chrono::steady_clock::duration elapsed);

// One BuildModel call (compile + engines + warm-up check), started at `start`:
// kiln_compile_duration_seconds, and kiln_differential_checks_total{outcome} when
// `check_outcome` is not null (server/model/model_builder.h CheckOutcome names it).
void RecordModelBuild(const std::string& model, const char* check_outcome,
                      std::chrono::steady_clock::time_point start);

// For the engine cache: one lookup, found (hit) or not (miss).
void EngineCacheResult(bool hit);

// A dynamic model's specialised shapes (server/serving/shape_engines.h): one request's lookup (hit:
// its shape had an entry), one entry evicted from the LRU, one engine build (compile, engine
// and check at that shape and bucket; failed builds too) and how long it took.
void ShapeEngineLookup(const std::string& model, bool hit);
void ShapeEngineEvicted(const std::string& model);
void ShapeEngineBuilt(const std::string& model, double seconds);

// Resident set size from /proc/self/status (VmRSS); 0 when unreadable.
int64_t ResidentMemoryBytes();

// A registry in the text exposition format 0.0.4 (kContentType).
std::string Serialize(const prometheus::Registry& r);

}  // namespace kiln::server::metrics

// Cumulative statistics of one model version, as the KServe v2 statistics extension reports
// them (ModelStatistics, GET /v2/models/{name}/stats): successful and failed requests with
// their time, queue time, engine time, rows and executions, and engine time per batch size.
// Prometheus keeps the same facts as histograms per model name; this keeps them per version
// as plain counters, which is what v2 clients (perf_analyzer's server-side view) read.
//
// Thread-safe and lock-free: every counter is an atomic, written by request handlers and
// batcher workers, read by the statistics calls (a snapshot may mix counts from a request in
// progress; each counter is exact on its own).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

namespace kiln::server {

class ModelStats {
 public:
  using Duration = std::chrono::steady_clock::duration;

  // `buckets`: the engine batch sizes, ascending (one execution counter each).
  explicit ModelStats(std::vector<int64_t> buckets);

  // One inference request answered (any protocol). `rows` count only when it succeeded.
  void RecordRequest(bool ok, Duration elapsed, int64_t rows);
  // One request left the batcher's queue after `waited`.
  void RecordQueued(Duration waited);
  // One engine run at batch size `bucket` (the engine's own batch, padding included).
  void RecordExecution(int64_t bucket, Duration compute);

  struct Count {
    uint64_t count = 0;
    uint64_t ns = 0;
  };
  struct Snapshot {
    Count success, fail, queue, compute;
    uint64_t inference_count = 0;                    // rows of successful requests
    uint64_t execution_count = 0;                    // engine runs
    uint64_t last_inference_ms = 0;                  // wall clock, ms since the epoch; 0: never
    std::vector<std::pair<int64_t, Count>> batches;  // per bucket that has run
  };
  Snapshot Read() const;

 private:
  struct Counter {
    std::atomic<uint64_t> count{0}, ns{0};
    void Add(Duration d);
    Count Read() const;
  };
  const std::vector<int64_t> buckets_;
  Counter success_, fail_, queue_, compute_;
  std::unique_ptr<Counter[]> per_bucket_;  // parallel to buckets_
  std::atomic<uint64_t> inference_count_{0}, execution_count_{0}, last_inference_ms_{0};
};

}  // namespace kiln::server

#include "server/serving/model_stats.h"

#include <algorithm>

namespace kiln::server {

ModelStats::ModelStats(std::vector<int64_t> buckets)
    : buckets_(std::move(buckets)), per_bucket_(new Counter[buckets_.size()]) {}

void ModelStats::Counter::Add(Duration d) {
  count.fetch_add(1, std::memory_order_relaxed);
  const auto ns_elapsed = std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
  ns.fetch_add(static_cast<uint64_t>(std::max<int64_t>(0, ns_elapsed)), std::memory_order_relaxed);
}

ModelStats::Count ModelStats::Counter::Read() const {
  return {count.load(std::memory_order_relaxed), ns.load(std::memory_order_relaxed)};
}

void ModelStats::RecordRequest(bool ok, Duration elapsed, int64_t rows) {
  (ok ? success_ : fail_).Add(elapsed);
  if (ok) inference_count_.fetch_add(static_cast<uint64_t>(rows), std::memory_order_relaxed);
  const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::system_clock::now().time_since_epoch());
  last_inference_ms_.store(static_cast<uint64_t>(now.count()), std::memory_order_relaxed);
}

void ModelStats::RecordQueued(Duration waited) { queue_.Add(waited); }

void ModelStats::RecordExecution(int64_t bucket, Duration compute) {
  compute_.Add(compute);
  execution_count_.fetch_add(1, std::memory_order_relaxed);
  const auto it = std::find(buckets_.begin(), buckets_.end(), bucket);
  if (it != buckets_.end()) per_bucket_[it - buckets_.begin()].Add(compute);
}

ModelStats::Snapshot ModelStats::Read() const {
  Snapshot s;
  s.success = success_.Read();
  s.fail = fail_.Read();
  s.queue = queue_.Read();
  s.compute = compute_.Read();
  s.inference_count = inference_count_.load(std::memory_order_relaxed);
  s.execution_count = execution_count_.load(std::memory_order_relaxed);
  s.last_inference_ms = last_inference_ms_.load(std::memory_order_relaxed);
  for (size_t i = 0; i < buckets_.size(); ++i) {
    const Count c = per_bucket_[i].Read();
    if (c.count > 0) s.batches.emplace_back(buckets_[i], c);
  }
  return s;
}

}  // namespace kiln::server

// Engines for the shapes a dynamic model (model config `dynamic_dims`) was not built at. The
// model's own engines serve its warm-up sizes; a request whose dynamic dims differ goes to
// the entry for its exact sizes, made on its first request: a batcher of its own (a worker per
// engine instance, as the model's own engines have), so requests batch only with requests of
// the same shape, and `instances` engines per batch bucket, built (compile once, the engines,
// the first one checked against the reference at that shape) by the first batch that needs
// them. Instances let a shape run that many batches at once: the generation loop's steps of
// one iteration run side by side (server/generate/generator.h). Requests behind that batch wait in
// the queue for the one build instead of building again. Entries live in an LRU of
// `max_shape_engines`; an evicted entry is freed once no request is queued on or running in it
// (checked at each later request).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "runtime/engine.h"
#include "server/serving/batcher.h"

namespace kiln::server {

// A request's size for every dynamic symbol (ModelSignature::dim_symbols).
using DimValues = std::map<std::string, int64_t>;
// "sequence=17,width=3": the LRU key, and how GetModel and errors name a shape.
std::string ShapeKey(const DimValues& dims);

// A map that keeps only its `capacity` most recently used keys. Not thread-safe.
template <class V>
class LruMap {
 public:
  explicit LruMap(size_t capacity) : capacity_(capacity < 1 ? 1 : capacity) {}
  // The value under `key`, now the most recently used; null when absent.
  V* Find(const std::string& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    order_.splice(order_.begin(), order_, it->second);
    return &it->second->second;
  }
  // Puts `value` under `key` (which must be absent) as the most recently used; returns the
  // values that fell out beyond the capacity, least recently used first.
  std::vector<V> Insert(const std::string& key, V value) {
    order_.emplace_front(key, std::move(value));
    index_[key] = order_.begin();
    std::vector<V> out;
    while (order_.size() > capacity_) {
      index_.erase(order_.back().first);
      out.push_back(std::move(order_.back().second));
      order_.pop_back();
    }
    return out;
  }
  size_t size() const { return order_.size(); }
  // Most recently used first.
  const std::list<std::pair<std::string, V>>& entries() const { return order_; }

 private:
  size_t capacity_;
  std::list<std::pair<std::string, V>> order_;  // most recently used first
  std::map<std::string, typename std::list<std::pair<std::string, V>>::iterator> index_;
};

// Builds the engine instances for one shape at one batch bucket (BuildShapeEngines, for a
// model), at least ShapeEngines' `instances` of them; `check`: run the warm-up check at that
// shape (on the first).
using ShapeEngineList = std::vector<std::unique_ptr<runtime::Engine>>;
using ShapeBuildFn = std::function<absl::StatusOr<ShapeEngineList>(const DimValues& dims,
                                                                   int64_t bucket, bool check)>;

// What GetModel shows of one kept shape.
struct ShapeSummary {
  std::string dims;              // ShapeKey
  std::vector<int64_t> batches;  // buckets with a built engine
  double build_ms = 0;           // all of this shape's builds
};

// Counted since the model started (the metrics count the same, per model name).
struct ShapeCounters {
  int64_t hits = 0, misses = 0, evictions = 0, builds = 0;
  int64_t prebuilt = 0;  // engines built at load (shape classes), not counted in builds
};

class ShapeEngines {
 public:
  // `policy`: the model's (buckets, queue limits, metrics label); each shape's batcher takes
  // it. `capacity`: shapes kept (max_shape_engines). `instances`: engines per shape and
  // bucket, each run by a worker of its own (the model's `instances`).
  static absl::StatusOr<std::unique_ptr<ShapeEngines>> Create(BatchPolicy policy, size_t capacity,
                                                              ShapeBuildFn build,
                                                              int instances = 1);
  ~ShapeEngines();  // Stop()s
  ShapeEngines(const ShapeEngines&) = delete;
  ShapeEngines& operator=(const ShapeEngines&) = delete;

  // Queues a validated request whose dynamic dims are `dims` on that shape's batcher (made
  // when new, evicting the least recently used shape beyond the capacity). A build failure
  // answers the requests of that batch, and later ones of that shape and bucket, with its
  // status (a size the model cannot take stays refused without rebuilding).
  absl::StatusOr<std::future<Batcher::Result>> Enqueue(const DimValues& dims,
                                                       std::vector<Tensor> inputs, int64_t rows,
                                                       std::optional<Clock::time_point> deadline,
                                                       AbandonFlag abandoned = nullptr,
                                                       RowFinish finish = nullptr,
                                                       RunHints hints = {});
  // Builds the engine of `dims` at `bucket` now (the shape's entry made when new), before the
  // model serves: a shape class's engines (server/model/padding.h). Its status is the build's.
  absl::Status Prebuild(const DimValues& dims, int64_t bucket, bool check);
  // Stops every shape's batcher (queued requests fail UNAVAILABLE; a build in progress is
  // cancelled at its next step). Idempotent.
  void Stop();
  std::vector<ShapeSummary> Shapes() const;  // most recently used first
  // Whether `pred` holds for every engine built so far (of every kept shape and bucket).
  bool EveryEngine(const std::function<bool(const runtime::Engine&)>& pred) const;
  ShapeCounters counters() const;

 private:
  struct Entry;
  ShapeEngines(BatchPolicy policy, size_t capacity, ShapeBuildFn build, int instances)
      : policy_(std::move(policy)),
        build_(std::move(build)),
        instances_(instances),
        lru_(capacity) {}
  absl::StatusOr<std::shared_ptr<Entry>> NewEntry(const DimValues& dims);
  // Runs one batch of `e` on its instance `worker` (that worker of its batcher, or a caller
  // inline in its place: never two batches on one instance at once). `appending`:
  // runtime::Engine::RunAppending (RunHints::append_in_place).
  absl::Status RunBatch(Entry& e, int worker, const std::vector<Tensor>& in,
                        std::vector<Tensor>& out, bool appending);
  absl::StatusOr<runtime::Engine*> EngineFor(Entry& e, int64_t bucket, int worker);
  // Builds and keeps `e`'s engines for `bucket` (a failure is kept too, unless stopped);
  // returns instance `worker`.
  absl::StatusOr<runtime::Engine*> Build(Entry& e, int64_t bucket, bool check, bool prebuild,
                                         int worker);
  // Precondition: mu_ held. The entry of `dims`, made and inserted when absent (`made` says
  // which); the evicted ones go to retired_.
  absl::StatusOr<std::shared_ptr<Entry>> FindOrInsertLocked(const DimValues& dims, bool& made);
  // Precondition: mu_ held. Moves the evicted entries nothing uses any more into `dead`.
  void ReapLocked(std::vector<std::shared_ptr<Entry>>& dead);

  const BatchPolicy policy_;
  const ShapeBuildFn build_;
  const int instances_;
  std::atomic<bool> stopping_{false};  // polled by builds in progress (base/stop.h)
  mutable std::mutex mu_;
  LruMap<std::shared_ptr<Entry>> lru_;           // guarded by mu_
  std::vector<std::shared_ptr<Entry>> retired_;  // evicted, maybe still in use; guarded by mu_
  ShapeCounters counters_;                       // guarded by mu_
};

}  // namespace kiln::server

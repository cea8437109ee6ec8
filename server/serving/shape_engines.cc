#include "server/serving/shape_engines.h"

#include <spdlog/spdlog.h>

#include <chrono>

#include "absl/strings/str_join.h"
#include "base/stop.h"
#include "server/metrics/kiln_metrics.h"

namespace kiln::server {

std::string ShapeKey(const DimValues& dims) {
  std::vector<std::string> parts;
  for (const auto& [name, size] : dims) parts.push_back(absl::StrCat(name, "=", size));
  return absl::StrJoin(parts, ",");
}

struct ShapeEngines::Entry {
  DimValues dims;
  std::string key;
  // Guards the maps (workers read them, Shapes() too); builds hold build_mu instead, so
  // another instance's batch and GetModel never wait for a build.
  mutable std::mutex mu;
  std::mutex build_mu;  // one build per entry at a time: a bucket's instances are built once
  std::map<int64_t, ShapeEngineList> engines;  // by bucket: one per instance
  std::map<int64_t, absl::Status> failures;    // buckets whose build failed: not retried
  double build_ms = 0;
  // Last, so it is destroyed (stopped, its worker joined) before the engines it runs.
  std::unique_ptr<Batcher> batcher;
};

absl::StatusOr<std::unique_ptr<ShapeEngines>> ShapeEngines::Create(BatchPolicy policy,
                                                                   size_t capacity,
                                                                   ShapeBuildFn build,
                                                                   int instances) {
  if (capacity < 1) return absl::InvalidArgumentError("shape engines: capacity must be >= 1");
  if (!build) return absl::InvalidArgumentError("shape engines: no build function");
  if (instances < 1) return absl::InvalidArgumentError("shape engines: instances must be >= 1");
  return std::unique_ptr<ShapeEngines>(
      new ShapeEngines(std::move(policy), capacity, std::move(build), instances));
}

ShapeEngines::~ShapeEngines() { Stop(); }

void ShapeEngines::Stop() {
  stopping_ = true;
  std::vector<std::shared_ptr<Entry>> all;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (const auto& [key, e] : lru_.entries()) all.push_back(e);
    all.insert(all.end(), retired_.begin(), retired_.end());
  }
  // Outside mu_: stopping joins a worker that may be finishing a build.
  for (const auto& e : all) e->batcher->Stop();
}

absl::StatusOr<std::shared_ptr<ShapeEngines::Entry>> ShapeEngines::NewEntry(const DimValues& dims) {
  auto e = std::make_shared<Entry>();
  e->dims = dims;
  e->key = ShapeKey(dims);
  Entry* raw = e.get();  // the batcher is the entry's member: it never outlives it
  auto run = [this, raw](int worker, const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    return RunBatch(*raw, worker, in, out, /*appending=*/false);
  };
  auto run_appending = [this, raw](int worker, const std::vector<Tensor>& in,
                                   std::vector<Tensor>& out) {
    return RunBatch(*raw, worker, in, out, /*appending=*/true);
  };
  ASSIGN_OR_RETURN(e->batcher, Batcher::Create(policy_, instances_, run, run_appending));
  return e;
}

absl::StatusOr<std::shared_ptr<ShapeEngines::Entry>> ShapeEngines::FindOrInsertLocked(
    const DimValues& dims, bool& made) {
  const std::string key = ShapeKey(dims);
  if (std::shared_ptr<Entry>* found = lru_.Find(key)) {
    made = false;
    return *found;
  }
  ASSIGN_OR_RETURN(std::shared_ptr<Entry> e, NewEntry(dims));
  made = true;
  for (std::shared_ptr<Entry>& old : lru_.Insert(key, e)) {
    ++counters_.evictions;
    metrics::ShapeEngineEvicted(policy_.model);
    retired_.push_back(std::move(old));
  }
  return e;
}

absl::StatusOr<std::future<Batcher::Result>> ShapeEngines::Enqueue(
    const DimValues& dims, std::vector<Tensor> inputs, int64_t rows,
    std::optional<Clock::time_point> deadline, AbandonFlag abandoned, RowFinish finish,
    RunHints hints) {
  std::shared_ptr<Entry> e;
  std::vector<std::shared_ptr<Entry>> dead;  // freed after mu_ is released (joins a thread)
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stopping_) return absl::UnavailableError("the model is being unloaded");
    bool made = false;
    ASSIGN_OR_RETURN(e, FindOrInsertLocked(dims, made));
    metrics::ShapeEngineLookup(policy_.model, /*hit=*/!made);
    ++(made ? counters_.misses : counters_.hits);
    ReapLocked(dead);
  }
  return e->batcher->Enqueue(std::move(inputs), rows, deadline, std::move(abandoned),
                             std::move(finish), std::move(hints));
}

absl::Status ShapeEngines::Prebuild(const DimValues& dims, int64_t bucket, bool check) {
  std::shared_ptr<Entry> e;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stopping_) return absl::UnavailableError("the model is being unloaded");
    bool made = false;
    ASSIGN_OR_RETURN(e, FindOrInsertLocked(dims, made));
  }
  return Build(*e, bucket, check, /*prebuild=*/true, /*worker=*/0).status();
}

void ShapeEngines::ReapLocked(std::vector<std::shared_ptr<Entry>>& dead) {
  for (size_t i = 0; i < retired_.size();) {
    // use_count 1: only this list holds it, so no request can still reach its batcher (a
    // request holds the entry until Enqueue returned, and then the batcher is not idle
    // until the request is answered).
    if (retired_[i].use_count() == 1 && retired_[i]->batcher->Idle()) {
      dead.push_back(std::move(retired_[i]));
      retired_.erase(retired_.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
}

absl::Status ShapeEngines::RunBatch(Entry& e, int worker, const std::vector<Tensor>& in,
                                    std::vector<Tensor>& out, bool appending) {
  const int64_t bucket = policy_.batchable ? in.at(0).dim(0) : 1;
  ASSIGN_OR_RETURN(runtime::Engine * engine, EngineFor(e, bucket, worker));
  return appending ? engine->RunAppending(in, out) : engine->Run(in, out);
}

namespace {

// Instance `worker` of the bucket's engines, the bucket's failure, or null (not built yet).
absl::StatusOr<runtime::Engine*> Built(const std::map<int64_t, ShapeEngineList>& engines,
                                       const std::map<int64_t, absl::Status>& failures,
                                       int64_t bucket, int worker) {
  if (auto it = engines.find(bucket); it != engines.end()) {
    return it->second.at(static_cast<size_t>(worker)).get();
  }
  if (auto it = failures.find(bucket); it != failures.end()) return it->second;
  return nullptr;
}

}  // namespace

absl::StatusOr<runtime::Engine*> ShapeEngines::EngineFor(Entry& e, int64_t bucket, int worker) {
  {
    std::lock_guard<std::mutex> lk(e.mu);
    absl::StatusOr<runtime::Engine*> built = Built(e.engines, e.failures, bucket, worker);
    if (!built.ok() || *built) return built;
  }
  return Build(e, bucket, /*check=*/true, /*prebuild=*/false, worker);
}

absl::StatusOr<runtime::Engine*> ShapeEngines::Build(Entry& e, int64_t bucket, bool check,
                                                     bool prebuild, int worker) {
  // Built without e.mu, so GetModel and the batches of other buckets do not wait for it;
  // build_mu makes a second instance's batch wait for this build instead of building again.
  // Unload and shutdown cancel it through stopping_.
  std::lock_guard<std::mutex> one_build(e.build_mu);
  {
    std::lock_guard<std::mutex> lk(e.mu);
    absl::StatusOr<runtime::Engine*> done = Built(e.engines, e.failures, bucket, worker);
    if (!done.ok() || *done) return done;
  }
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<ShapeEngineList> built;
  {
    // Not stopped with the batch that asked for it: the engine serves every later request
    // of this shape, so a client's short deadline must not throw a nearly done build away.
    StopCondition cond(StopCondition::Clock::time_point::max(), &stopping_, "shape build");
    cond.isolated = true;
    const StopScope stop(std::move(cond));
    built = build_(e.dims, bucket, check);
  }
  if (built.ok() && built->size() < static_cast<size_t>(instances_)) {
    built = absl::InternalError(absl::StrCat("the shape's build made ", built->size(),
                                             " engines for ", instances_, " instances"));
  }
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - t0;
  if (!prebuild) metrics::ShapeEngineBuilt(policy_.model, took.count());
  spdlog::info("model {}: shape {} batch {}: {} in {:.0f} ms{}", policy_.model, e.key, bucket,
               built.ok() ? "built" : std::string(built.status().message()), took.count() * 1e3,
               prebuild ? (check ? " (shape class, checked)" : " (shape class)") : "");
  {
    std::lock_guard<std::mutex> counters_lock(mu_);
    ++(prebuild ? counters_.prebuilt : counters_.builds);
  }
  std::lock_guard<std::mutex> lk(e.mu);
  e.build_ms += took.count() * 1e3;
  if (!built.ok()) {
    absl::Status s(built.status().code(), absl::StrCat("shape ", e.key, ", batch ", bucket, ": ",
                                                       built.status().message()));
    if (!IsStopError(built.status())) e.failures[bucket] = s;
    return s;
  }
  runtime::Engine* engine = (*built)[static_cast<size_t>(worker)].get();
  e.engines[bucket] = std::move(*built);
  return engine;
}

std::vector<ShapeSummary> ShapeEngines::Shapes() const {
  std::vector<std::shared_ptr<Entry>> kept;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (const auto& [key, e] : lru_.entries()) kept.push_back(e);
  }
  std::vector<ShapeSummary> out;
  for (const auto& e : kept) {
    std::lock_guard<std::mutex> lk(e->mu);
    ShapeSummary s{e->key, {}, e->build_ms};
    for (const auto& [bucket, engine] : e->engines) s.batches.push_back(bucket);
    out.push_back(std::move(s));
  }
  return out;
}

ShapeCounters ShapeEngines::counters() const {
  std::lock_guard<std::mutex> lk(mu_);
  return counters_;
}

}  // namespace kiln::server

namespace kiln::server {

bool ShapeEngines::EveryEngine(const std::function<bool(const runtime::Engine&)>& pred) const {
  std::vector<std::shared_ptr<Entry>> kept;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (const auto& [key, e] : lru_.entries()) kept.push_back(e);
  }
  for (const auto& e : kept) {
    std::lock_guard<std::mutex> lk(e->mu);
    for (const auto& [bucket, list] : e->engines) {
      for (const auto& engine : list) {
        if (!pred(*engine)) return false;
      }
    }
  }
  return true;
}

}  // namespace kiln::server

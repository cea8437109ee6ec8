#include "server/serving/batcher.h"

#include <algorithm>
#include <cstring>

#include "base/stop.h"

namespace kiln::server {

int64_t BucketFor(int64_t rows, const std::vector<int64_t>& buckets) {
  for (int64_t b : buckets) {
    if (b >= rows) return b;
  }
  return 0;
}

BatchDecision DecideBatch(const std::vector<QueuedItem>& queue, Clock::time_point now,
                          const BatchPolicy& policy) {
  BatchDecision d;
  const int64_t max_rows = policy.buckets.empty() ? 1 : policy.buckets.back();
  bool blocked = false;  // the next live request does not fit: the batch cannot grow
  std::optional<Clock::time_point> oldest, earliest_deadline;
  bool urgent = false;  // a taken request asked to run without waiting
  for (size_t i = 0; i < queue.size(); ++i) {
    const QueuedItem& q = queue[i];
    if (q.deadline && *q.deadline <= now) {
      d.expired.push_back(i);
      continue;
    }
    if (q.deadline && (!earliest_deadline || *q.deadline < *earliest_deadline)) {
      earliest_deadline = q.deadline;
    }
    if (blocked) continue;  // keep scanning: later requests may have expired too
    if (!d.take.empty() &&
        (!policy.batchable || d.rows + q.rows > max_rows || q.alone || queue[d.take[0]].alone)) {
      blocked = true;
      continue;
    }
    if (d.take.empty()) oldest = q.enqueued;
    d.take.push_back(i);
    d.rows += q.rows;
    urgent |= q.run_now;
  }
  if (d.take.empty()) return d;  // nothing live: sleep until something arrives
  // An item that runs alone has no company to wait for.
  const bool full = blocked || d.rows >= max_rows || !policy.batchable || queue[d.take[0]].alone;
  if (full || urgent || now - *oldest >= policy.max_queue_delay) {
    d.bucket = policy.batchable ? BucketFor(d.rows, policy.buckets) : d.rows;
    return d;
  }
  d.take.clear();
  d.rows = 0;
  d.wake_at = *oldest + policy.max_queue_delay;
  // Wake for the first deadline too, so an expiring request is answered when it expires.
  if (earliest_deadline && *earliest_deadline < *d.wake_at) d.wake_at = earliest_deadline;
  return d;
}

absl::StatusOr<Tensor> ConcatRows(const std::vector<const Tensor*>& parts, int64_t rows) {
  if (parts.empty()) return absl::InternalError("ConcatRows: no parts");
  const Tensor& first = *parts[0];
  if (first.rank() < 1) return absl::InternalError("ConcatRows: a batched tensor needs rank >= 1");
  // A lone request that fills its bucket is passed through (the buffer is shared, not copied):
  // the common case at low load, where a copy is pure latency.
  if (parts.size() == 1 && first.dim(0) == rows) return first;
  std::vector<int64_t> shape = first.shape();
  shape[0] = rows;
  Tensor out = Tensor::Uninitialized(first.dtype(), shape);
  size_t offset = 0;
  for (const Tensor* p : parts) {
    if (p->dtype() != first.dtype() || p->rank() != first.rank() ||
        !std::equal(p->shape().begin() + 1, p->shape().end(), first.shape().begin() + 1)) {
      return absl::InternalError("ConcatRows: parts disagree in dtype or trailing dims");
    }
    if (offset + p->nbytes() > out.nbytes()) return absl::InternalError("ConcatRows: overflow");
    std::memcpy(static_cast<char*>(out.raw_mutable()) + offset, p->raw(), p->nbytes());
    offset += p->nbytes();
  }
  // The padding rows are zeros.
  std::memset(static_cast<char*>(out.raw_mutable()) + offset, 0, out.nbytes() - offset);
  return out;
}

Tensor SliceRows(const Tensor& t, int64_t begin, int64_t count) {
  // All rows: share the buffer. Safe because RunBatch hands the engine fresh output tensors.
  if (begin == 0 && t.rank() >= 1 && count == t.dim(0)) return t;
  std::vector<int64_t> shape = t.shape();
  const size_t row_bytes = t.dim(0) == 0 ? 0 : t.nbytes() / static_cast<size_t>(t.dim(0));
  shape[0] = count;
  Tensor out = Tensor::Uninitialized(t.dtype(), shape);
  std::memcpy(out.raw_mutable(), static_cast<const char*>(t.raw()) + begin * row_bytes,
              count * row_bytes);
  return out;
}

absl::StatusOr<std::unique_ptr<Batcher>> Batcher::Create(BatchPolicy policy, int workers,
                                                         BatchRunFn run, BatchRunFn run_appending) {
  if (policy.buckets.empty()) return absl::InvalidArgumentError("batcher: no batch buckets");
  if (!std::is_sorted(policy.buckets.begin(), policy.buckets.end()) || policy.buckets[0] < 1) {
    return absl::InvalidArgumentError("batcher: buckets must be positive and ascending");
  }
  if (workers < 1) return absl::InvalidArgumentError("batcher: need at least one worker");
  if (policy.max_queue_size < 1) return absl::InvalidArgumentError("batcher: empty queue");
  std::unique_ptr<Batcher> b(
      new Batcher(std::move(policy), std::move(run), std::move(run_appending)));
  b->busy_.assign(static_cast<size_t>(workers), 0);
  for (int w = 0; w < workers; ++w)
    b->workers_.emplace_back([raw = b.get(), w] { raw->WorkerLoop(w); });
  return b;
}

Batcher::~Batcher() { Stop(); }

absl::StatusOr<std::future<Batcher::Result>> Batcher::Enqueue(
    std::vector<Tensor> inputs, int64_t rows, std::optional<Clock::time_point> deadline,
    AbandonFlag abandoned, RowFinish finish, RunHints hints) {
  if (rows < 1 || rows > policy_.buckets.back()) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch of ", rows, " rows; the model takes 1..", policy_.buckets.back()));
  }
  if (hints.append_in_place) {
    if (!run_appending_) {
      return absl::FailedPreconditionError("this model's engines do not append in place");
    }
    if (policy_.batchable && BucketFor(rows, policy_.buckets) != rows) {
      return absl::InvalidArgumentError(
          absl::StrCat("an in-place append runs alone at a batch size the model has, not ", rows));
    }
  }
  Request r;
  r.item =
      QueuedItem{rows, Clock::now(), deadline, hints.run_now, hints.append_in_place || hints.alone};
  r.appending = hints.append_in_place;
  r.reuse = std::move(hints.outputs);
  r.inputs = std::move(inputs);
  r.abandoned = std::move(abandoned);
  r.finish = std::move(finish);
  std::future<Result> f = r.promise.get_future();
  {
    std::unique_lock<std::mutex> lk(mu_);
    if (stopping_) return absl::UnavailableError("the model is being unloaded");
    if (TryRunInline(lk, r)) return f;
    if (queue_.size() >= policy_.max_queue_size) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the model's request queue is full (", policy_.max_queue_size, " waiting)"));
    }
    queue_.push_back(std::move(r));
    metrics_.queue_depth().Increment();
  }
  cv_.notify_one();
  return f;
}

bool Batcher::TryRunInline(std::unique_lock<std::mutex>& lk, Request& r) {
  if (!policy_.inline_when_idle || !queue_.empty()) return false;  // FIFO: the queue goes first
  const auto idle = std::find(busy_.begin(), busy_.end(), 0);
  if (idle == busy_.end()) return false;
  const BatchDecision d = DecideBatch({r.item}, Clock::now(), policy_);
  if (d.take.empty()) return false;  // it would wait for company (or has expired)
  const int worker = static_cast<int>(idle - busy_.begin());
  *idle = 1;
  ++inline_runs_;
  lk.unlock();
  std::vector<Request> batch;
  batch.push_back(std::move(r));
  RecordTaken(batch, d.rows);
  RunBatch(worker, batch, d.bucket);
  lk.lock();
  busy_[worker] = 0;
  --inline_runs_;
  // Requests may have queued meanwhile, and Stop may be waiting for this run.
  cv_.notify_all();
  return true;
}

void Batcher::Stop() {
  std::deque<Request> leftover;
  {
    std::unique_lock<std::mutex> lk(mu_);
    if (stopping_ && workers_.empty() && inline_runs_ == 0) return;
    stopping_ = true;
    cv_.notify_all();
    // Batches running on callers' threads use the engines too: they finish first.
    cv_.wait(lk, [this] { return inline_runs_ == 0; });
  }
  for (std::thread& t : workers_) {
    if (t.joinable()) t.join();
  }
  workers_.clear();
  {
    std::lock_guard<std::mutex> lk(mu_);
    leftover.swap(queue_);
    metrics_.queue_depth().Decrement(static_cast<double>(leftover.size()));
  }
  for (Request& r : leftover) r.promise.set_value(absl::UnavailableError("the server is stopping"));
}

bool Batcher::Idle() {
  std::lock_guard<std::mutex> lk(mu_);
  return queue_.empty() && inline_runs_ == 0 &&
         std::find(busy_.begin(), busy_.end(), 1) == busy_.end();
}

std::vector<Batcher::Request> Batcher::TakeLocked(const BatchDecision& d) {
  std::vector<bool> expired(queue_.size(), false), taken(queue_.size(), false);
  for (size_t i : d.expired) expired[i] = true;
  for (size_t i : d.take) taken[i] = true;
  std::vector<Request> out;  // taken requests first, then expired ones (after `take.size()`)
  std::vector<Request> dead;
  std::deque<Request> rest;
  for (size_t i = 0; i < queue_.size(); ++i) {
    if (taken[i]) {
      out.push_back(std::move(queue_[i]));
    } else if (expired[i]) {
      dead.push_back(std::move(queue_[i]));
    } else {
      rest.push_back(std::move(queue_[i]));
    }
  }
  metrics_.queue_depth().Decrement(static_cast<double>(queue_.size() - rest.size()));
  queue_.swap(rest);
  for (Request& r : dead) out.push_back(std::move(r));
  return out;
}

void Batcher::WorkerLoop(int worker) {
  std::unique_lock<std::mutex> lk(mu_);
  while (!stopping_) {
    if (queue_.empty() || busy_[worker]) {  // busy: a caller is running on this instance
      cv_.wait(lk);
      continue;
    }
    std::vector<QueuedItem> snapshot;
    snapshot.reserve(queue_.size());
    for (const Request& r : queue_) snapshot.push_back(r.item);
    const BatchDecision d = DecideBatch(snapshot, Clock::now(), policy_);
    std::vector<Request> batch = TakeLocked(d);
    const bool more = !queue_.empty();
    busy_[worker] = 1;
    lk.unlock();
    if (more && !d.take.empty()) cv_.notify_one();  // another worker may take the rest
    for (size_t i = d.take.size(); i < batch.size(); ++i) {
      batch[i].promise.set_value(
          absl::DeadlineExceededError("the deadline expired while the request was queued"));
    }
    batch.resize(d.take.size());
    if (!batch.empty()) {
      RecordTaken(batch, d.rows);
      RunBatch(worker, batch, d.bucket);
    }
    lk.lock();
    busy_[worker] = 0;
    if (batch.empty() && d.wake_at && !stopping_) cv_.wait_until(lk, *d.wake_at);
  }
}

void Batcher::RecordTaken(const std::vector<Request>& batch, int64_t rows) {
  const Clock::time_point now = Clock::now();
  for (const Request& r : batch) {
    const std::chrono::duration<double> waited = now - r.item.enqueued;
    metrics_.queue_duration().Observe(waited.count());
    if (policy_.stats) policy_.stats->RecordQueued(now - r.item.enqueued);
  }
  metrics_.batch_size().Observe(static_cast<double>(rows));
}

namespace {

// Stops a batch's run once no one waits for any of its requests: every deadline has passed
// (a request without one keeps the batch going), or every client has gone.
StopCondition BatchStop(const std::vector<const std::atomic<bool>*>& flags,
                        const std::vector<std::optional<Clock::time_point>>& deadlines) {
  StopCondition c;
  c.what = "the batch";
  c.cancel_all = flags;
  Clock::time_point latest = Clock::time_point::min();
  for (const auto& d : deadlines) latest = d ? std::max(latest, *d) : Clock::time_point::max();
  c.deadline = latest;
  return c;
}

}  // namespace

absl::Status Batcher::Execute(int worker, std::vector<Request>& batch, int64_t bucket,
                              std::vector<Tensor>& outputs) {
  std::vector<const std::atomic<bool>*> flags;
  std::vector<std::optional<Clock::time_point>> deadlines;
  for (const Request& r : batch) {
    if (r.abandoned) flags.push_back(r.abandoned.get());
    deadlines.push_back(r.item.deadline);
  }
  if (flags.size() != batch.size()) flags.clear();  // someone without a flag still waits
  const StopScope stop(BatchStop(flags, deadlines));
  return WithinBudget(memory_, [&]() -> absl::Status {
    RETURN_IF_ERROR(CheckStop());  // every request gave up while it was queued
    std::vector<Tensor> inputs;
    // One request of the bucket's size (or of a model without a batch dim) is its own batch:
    // its tensors are the engine's inputs as they are (tensors share their buffers).
    if (!policy_.batchable || (batch.size() == 1 && batch[0].item.rows == bucket)) {
      inputs = batch[0].inputs;
    } else {
      for (size_t k = 0; k < batch[0].inputs.size(); ++k) {
        std::vector<const Tensor*> parts;
        for (const Request& r : batch) parts.push_back(&r.inputs[k]);
        ASSIGN_OR_RETURN(Tensor t, ConcatRows(parts, bucket));
        inputs.push_back(std::move(t));
      }
    }
    // An appending request is never batched with another (DecideBatch) and fills its bucket
    // (Enqueue): it is alone, its outputs are its own.
    const bool appending = batch.size() == 1 && batch[0].appending;
    const Clock::time_point start = Clock::now();
    absl::Status status =
        appending ? run_appending_(worker, inputs, outputs) : run_(worker, inputs, outputs);
    const Clock::duration took = Clock::now() - start;
    metrics_.compute_duration(bucket).Observe(std::chrono::duration<double>(took).count());
    if (policy_.stats) policy_.stats->RecordExecution(bucket, took);
    return status;
  });
}

void Batcher::RunBatch(int worker, std::vector<Request>& batch, int64_t bucket) {
  std::vector<Tensor> outputs;
  const bool alone = batch.size() == 1 && (!policy_.batchable || batch[0].item.rows == bucket);
  if (alone) outputs = std::move(batch[0].reuse);
  absl::Status status = Execute(worker, batch, bucket, outputs);
  for (const Tensor& o : outputs) {
    if (status.ok() && policy_.batchable && (o.rank() < 1 || o.dim(0) != bucket)) {
      status = absl::InternalError("an output has no batch dim: cannot split the batch");
    }
  }
  // Each request's rows are copied out under the budget too: a copy it refuses fails that
  // request alone.
  int64_t offset = 0;
  for (Request& r : batch) {
    if (!status.ok()) {
      r.promise.set_value(status);
      continue;
    }
    const int64_t begin = offset;
    offset += r.item.rows;
    r.promise.set_value(WithinBudget(memory_, [&]() -> Result {
      std::vector<Tensor> mine;
      if (alone) {
        mine = std::move(outputs);  // made by this run for this request alone: no copy
      } else {
        for (const Tensor& o : outputs) {
          mine.push_back(policy_.batchable ? SliceRows(o, begin, r.item.rows) : o.Clone());
        }
      }
      if (r.finish) RETURN_IF_ERROR(r.finish(mine));
      return mine;
    }));
  }
}

}  // namespace kiln::server

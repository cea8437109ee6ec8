// Dynamic batching. Requests of one model queue up; a worker thread per engine instance takes
// as many as fit in the largest bucket (FIFO, never reordering), concatenates them along the
// batch dim, zero-pads to the next bucket, runs the engine and hands every request its own
// rows back. The decision of what to run next is a pure function of the queue snapshot
// (DecideBatch), unit-tested without threads.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/memory_budget.h"
#include "base/status.h"
#include "ir/tensor.h"
#include "server/metrics/kiln_metrics.h"
#include "server/serving/model_stats.h"

namespace kiln::server {

using Clock = std::chrono::steady_clock;

struct BatchPolicy {
  std::vector<int64_t> buckets;  // ascending; the last is the largest batch
  std::chrono::microseconds max_queue_delay{0};
  size_t max_queue_size = 256;
  // False for models whose batch dim is fixed: each request runs alone, unpadded.
  bool batchable = true;
  std::string model;  // the `model` label of the batcher's metrics
  // Enqueue may run a request on the caller's thread (see Enqueue). Off, Enqueue never blocks.
  bool inline_when_idle = false;
  // Queue waits and engine runs are also counted here when set (the model version's
  // statistics, which outlive the batcher).
  ModelStats* stats = nullptr;
};

// Set by whoever waits for a request once it stops waiting (its deadline passed, its client
// went away): a batch all of whose requests are abandoned stops at its next step.
using AbandonFlag = std::shared_ptr<std::atomic<bool>>;

// Applied to one request's outputs once its rows are split out of the batch (a request
// padded to a shape class cuts its outputs back to its own sizes: server/model/padding.h); an
// error fails that request alone.
using RowFinish = std::function<absl::Status(std::vector<Tensor>&)>;

// What a caller that forms its own batches asks of one request (a generation step).
struct RunHints {
  // Run without waiting max_queue_delay for more rows (QueuedItem::run_now).
  bool run_now = false;
  // Tensors to write the outputs into when the request runs alone at its own size (an engine
  // writes in place into tensors of the right dtype and shape): a caller repeating one shape
  // reuses its buffers instead of faulting fresh pages in every run.
  std::vector<Tensor> outputs;
  // `outputs` hold the inputs the engine appends to in place (runtime::Engine::RunAppending):
  // the request runs alone, at a batch bucket's size, through the batcher's appending run.
  bool append_in_place = false;
  // Never batched with another request: a model whose rows must share what its first row's
  // mask says (server/model/cache_mask.h), fed rows another caller did not line up with it.
  bool alone = false;
};

// What DecideBatch sees of a queued request.
struct QueuedItem {
  int64_t rows = 1;
  Clock::time_point enqueued;
  std::optional<Clock::time_point> deadline;
  // Run without waiting max_queue_delay for more rows: the caller batched already (a
  // generation step, server/generate/).
  bool run_now = false;
  // Never batched with another request (RunHints::append_in_place, RunHints::alone).
  bool alone = false;
};

struct BatchDecision {
  std::vector<size_t> expired;  // queue indices whose deadline passed: fail, never run
  std::vector<size_t> take;     // queue indices to run now, in queue order (empty: wait)
  int64_t rows = 0;             // sum of rows taken
  int64_t bucket = 0;           // the engine batch size to run them at (rows <= bucket)
  std::optional<Clock::time_point> wake_at;  // when nothing is taken: re-decide then
};

// Pure: takes the longest FIFO prefix of live requests that fits the largest bucket. Runs it
// now when it fills the largest bucket, when the next request would not fit, or when the
// oldest live request has waited max_queue_delay; otherwise says when to look again.
BatchDecision DecideBatch(const std::vector<QueuedItem>& queue, Clock::time_point now,
                          const BatchPolicy& policy);
// The smallest bucket >= rows (0 when rows exceed every bucket).
int64_t BucketFor(int64_t rows, const std::vector<int64_t>& buckets);

// Runs one batch on engine instance `worker`: inputs are per model input, dim 0 == bucket.
using BatchRunFn = std::function<absl::Status(int worker, const std::vector<Tensor>& inputs,
                                              std::vector<Tensor>& outputs)>;

class Batcher {
 public:
  using Result = absl::StatusOr<std::vector<Tensor>>;

  // Validates the policy and starts `workers` threads (one per engine instance).
  // `run_appending` (optional) runs the requests with RunHints::append_in_place.
  static absl::StatusOr<std::unique_ptr<Batcher>> Create(BatchPolicy policy, int workers,
                                                         BatchRunFn run,
                                                         BatchRunFn run_appending = nullptr);
  ~Batcher();  // Stop()s
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // `inputs`: one tensor per model input, dim 0 == rows (rows <= largest bucket). The future
  // yields this request's output rows. RESOURCE_EXHAUSTED when the queue is full,
  // UNAVAILABLE after Stop. With policy.inline_when_idle, when the queue is empty, an engine
  // instance is idle and the policy would run this request alone right away, it runs on the
  // caller's thread before Enqueue returns: two thread hand-offs saved at low load.
  // `abandoned` (optional): see AbandonFlag. The batch's run is also stopped once every
  // request's deadline has passed. `finish` (optional): see RowFinish. `hints`: see
  // RunHints.
  absl::StatusOr<std::future<Result>> Enqueue(std::vector<Tensor> inputs, int64_t rows,
                                              std::optional<Clock::time_point> deadline,
                                              AbandonFlag abandoned = nullptr,
                                              RowFinish finish = nullptr, RunHints hints = {});
  // Fails every queued request with UNAVAILABLE, lets running batches finish, joins.
  // Idempotent.
  void Stop();
  // Nothing queued and no batch running: what an evicted shape's batcher waits for before
  // it is freed (server/serving/shape_engines.h).
  bool Idle();

 private:
  struct Request {
    QueuedItem item;
    std::vector<Tensor> inputs;
    std::promise<Result> promise;
    AbandonFlag abandoned;
    RowFinish finish;
    std::vector<Tensor> reuse;  // RunHints::outputs
    bool appending = false;     // RunHints::append_in_place
  };
  Batcher(BatchPolicy policy, BatchRunFn run, BatchRunFn run_appending)
      : policy_(std::move(policy)),
        run_(std::move(run)),
        run_appending_(std::move(run_appending)),
        metrics_(policy_.model, policy_.buckets),
        memory_(std::make_shared<MemoryAccount>("the batches of model '" + policy_.model + "'", 0,
                                                ProcessMemory())) {}
  void WorkerLoop(int worker);
  // Precondition: mu_ held (released while running). Runs `r` on an idle instance if the
  // policy says it would run alone now; false (and `r` untouched) otherwise.
  bool TryRunInline(std::unique_lock<std::mutex>& lk, Request& r);
  // Precondition: mu_ held. Pops expired and to-run requests as `decision` says.
  std::vector<Request> TakeLocked(const BatchDecision& decision);
  void RunBatch(int worker, std::vector<Request>& batch, int64_t bucket);
  // Assembles the batch's inputs and runs them: within the batch's stop condition (the
  // latest deadline, every request abandoned) and charged to the process memory budget.
  absl::Status Execute(int worker, std::vector<Request>& batch, int64_t bucket,
                       std::vector<Tensor>& outputs);
  // Queue wait of every request in `batch` and the batch's size, as it leaves the queue.
  void RecordTaken(const std::vector<Request>& batch, int64_t rows);

  const BatchPolicy policy_;
  const BatchRunFn run_;
  const BatchRunFn run_appending_;
  metrics::BatcherMetrics metrics_;  // handles resolved once; the children are atomics
  // What batch assembly, runs and the split into requests allocate (no cap of its own: the
  // process budget bounds it), made once rather than per batch.
  const std::shared_ptr<MemoryAccount> memory_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Request> queue_;  // guarded by mu_
  bool stopping_ = false;      // guarded by mu_
  std::vector<char> busy_;     // per instance: running a batch (guarded by mu_)
  int inline_runs_ = 0;        // batches running on callers' threads (guarded by mu_)
  std::vector<std::thread> workers_;
};

// Concatenates along dim 0 (every part has the same dtype and trailing dims) and zero-pads to
// `rows` rows.
absl::StatusOr<Tensor> ConcatRows(const std::vector<const Tensor*>& parts, int64_t rows);
// Rows [begin, begin + count) of `t`, copied.
Tensor SliceRows(const Tensor& t, int64_t begin, int64_t count);

}  // namespace kiln::server

// Dynamic batching: the pure decision function, and the threaded batcher with a fake engine.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "base/memory_budget.h"
#include "base/stop.h"
#include "server/serving/batcher.h"

namespace kiln::server {
namespace {

using std::chrono::microseconds;

BatchPolicy Policy(std::vector<int64_t> buckets, int64_t delay_us) {
  BatchPolicy p;
  p.buckets = std::move(buckets);
  p.max_queue_delay = microseconds(delay_us);
  return p;
}

const Clock::time_point kT0 = Clock::time_point() + std::chrono::hours(1);

QueuedItem Item(int64_t rows, int64_t age_us, Clock::time_point now = kT0) {
  return QueuedItem{rows, now - microseconds(age_us), std::nullopt};
}

TEST(DecideBatch, EmptyQueueWaitsForever) {
  BatchDecision d = DecideBatch({}, kT0, Policy({1, 2, 4}, 100));
  EXPECT_TRUE(d.take.empty());
  EXPECT_FALSE(d.wake_at.has_value());
}

TEST(DecideBatch, YoungPartialBatchWaitsUntilTheDelay) {
  BatchDecision d = DecideBatch({Item(1, 10), Item(1, 5)}, kT0, Policy({1, 2, 4}, 100));
  EXPECT_TRUE(d.take.empty());
  ASSERT_TRUE(d.wake_at.has_value());
  EXPECT_EQ(*d.wake_at, kT0 - microseconds(10) + microseconds(100));
}

TEST(DecideBatch, OldPartialBatchRunsPaddedToTheNextBucket) {
  BatchDecision d = DecideBatch({Item(1, 150), Item(2, 5)}, kT0, Policy({1, 2, 4, 8}, 100));
  EXPECT_EQ(d.take, (std::vector<size_t>{0, 1}));
  EXPECT_EQ(d.rows, 3);
  EXPECT_EQ(d.bucket, 4);
}

TEST(DecideBatch, FullBatchRunsAtOnce) {
  BatchDecision d = DecideBatch({Item(2, 0), Item(2, 0), Item(1, 0)}, kT0, Policy({1, 2, 4}, 1000));
  EXPECT_EQ(d.take, (std::vector<size_t>{0, 1}));
  EXPECT_EQ(d.bucket, 4);
}

TEST(DecideBatch, ARunNowRequestDoesNotWaitForTheDelay) {
  QueuedItem now = Item(2, 0);
  now.run_now = true;
  BatchDecision d = DecideBatch({Item(1, 5), now}, kT0, Policy({1, 2, 4, 8}, 1000));
  EXPECT_EQ(d.take, (std::vector<size_t>{0, 1}));  // takes what is queued with it
  EXPECT_EQ(d.bucket, 4);
  now.run_now = false;  // the negative case: the same queue waits
  EXPECT_TRUE(DecideBatch({Item(1, 5), now}, kT0, Policy({1, 2, 4, 8}, 1000)).take.empty());
}

TEST(DecideBatch, ARequestThatRunsAloneDoesNotWaitForCompany) {
  QueuedItem alone = Item(1, 0);
  alone.alone = true;
  BatchDecision d = DecideBatch({alone, Item(1, 0)}, kT0, Policy({1, 2, 4}, 1000));
  EXPECT_EQ(d.take, (std::vector<size_t>{0}));  // not joined by the one behind it
  EXPECT_EQ(d.bucket, 1);
  d = DecideBatch({alone}, kT0, Policy({1, 2, 4}, 1000));
  EXPECT_EQ(d.take, (std::vector<size_t>{0}));  // and run before the delay
  EXPECT_TRUE(DecideBatch({Item(1, 0)}, kT0, Policy({1, 2, 4}, 1000)).take.empty());
}

TEST(DecideBatch, NextRequestNotFittingClosesTheBatchFifo) {
  // 3 rows queued, the next request has 2: it would overflow 4, and is never jumped over.
  BatchDecision d = DecideBatch({Item(3, 0), Item(2, 0), Item(1, 0)}, kT0, Policy({1, 2, 4}, 1000));
  EXPECT_EQ(d.take, (std::vector<size_t>{0}));
  EXPECT_EQ(d.bucket, 4);
}

TEST(DecideBatch, ZeroDelayRunsWhateverIsQueued) {
  BatchDecision d = DecideBatch({Item(1, 0)}, kT0, Policy({1, 2}, 0));
  EXPECT_EQ(d.take.size(), 1u);
  EXPECT_EQ(d.bucket, 1);
}

TEST(DecideBatch, ExpiredRequestsAreNeverRun) {
  QueuedItem dead = Item(1, 500);
  dead.deadline = kT0 - microseconds(1);
  QueuedItem later_dead = Item(1, 5);
  later_dead.deadline = kT0;
  BatchDecision d = DecideBatch({dead, Item(1, 200), later_dead}, kT0, Policy({1, 2, 4}, 100));
  EXPECT_EQ(d.expired, (std::vector<size_t>{0, 2}));
  EXPECT_EQ(d.take, (std::vector<size_t>{1}));
  EXPECT_EQ(d.bucket, 1);
}

TEST(DecideBatch, WakesForTheFirstDeadline) {
  QueuedItem soon = Item(1, 0);
  soon.deadline = kT0 + microseconds(30);
  BatchDecision d = DecideBatch({soon}, kT0, Policy({1, 2}, 100));
  ASSERT_TRUE(d.wake_at.has_value());
  EXPECT_EQ(*d.wake_at, kT0 + microseconds(30));
}

TEST(DecideBatch, UnbatchableModelsRunOneAtATime) {
  BatchPolicy p = Policy({1}, 1000);
  p.batchable = false;
  BatchDecision d = DecideBatch({Item(1, 0), Item(1, 0)}, kT0, p);
  EXPECT_EQ(d.take, (std::vector<size_t>{0}));
  EXPECT_EQ(d.bucket, 1);
}

TEST(BatchTensors, ConcatPadsAndSliceCopies) {
  Tensor a = Tensor::FromFloat({1, 2}, {1, 2});
  Tensor b = Tensor::FromFloat({3, 4, 5, 6}, {2, 2});
  auto c = ConcatRows({&a, &b}, 4);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->shape(), (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(c->ToDoubleVector(), (std::vector<double>{1, 2, 3, 4, 5, 6, 0, 0}));
  EXPECT_EQ(SliceRows(*c, 1, 2).ToDoubleVector(), (std::vector<double>{3, 4, 5, 6}));
  Tensor bad = Tensor::FromFloat({1, 2, 3}, {1, 3});
  EXPECT_FALSE(ConcatRows({&a, &bad}, 2).ok());
}

TEST(BatchTensors, AFullLoneTensorIsSharedNotCopied) {
  Tensor b = Tensor::FromFloat({3, 4, 5, 6}, {2, 2});
  auto whole = ConcatRows({&b}, 2);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->raw(), b.raw());
  EXPECT_EQ(SliceRows(b, 0, 2).raw(), b.raw());
  // Negative: a lone tensor below its bucket is padded into a new buffer, and a part of the
  // rows is copied out.
  auto padded = ConcatRows({&b}, 4);
  ASSERT_TRUE(padded.ok());
  EXPECT_NE(padded->raw(), b.raw());
  EXPECT_EQ(padded->ToDoubleVector(), (std::vector<double>{3, 4, 5, 6, 0, 0, 0, 0}));
  const Tensor first = SliceRows(b, 0, 1);
  EXPECT_NE(first.raw(), b.raw());
  EXPECT_EQ(first.ToDoubleVector(), (std::vector<double>{3, 4}));
}

// Fake engine: output row = input row * 10 + the bucket it ran at (to see padding).
absl::Status TimesTen(int, const std::vector<Tensor>& in, std::vector<Tensor>& out) {
  Tensor t(DType::kFloat32, in[0].shape());
  for (int64_t i = 0; i < t.numel(); ++i) t.SetDouble(i, in[0].GetDouble(i) * 10);
  out = {t};
  return absl::OkStatus();
}

TEST(Batcher, EveryRequestGetsItsOwnRows) {
  auto b = Batcher::Create(Policy({1, 2, 4, 8}, 2000), 2, TimesTen);
  ASSERT_TRUE(b.ok()) << b.status();
  std::vector<std::future<Batcher::Result>> futures;
  for (int i = 0; i < 40; ++i) {
    auto f = (*b)->Enqueue({Tensor::FromFloat({float(i), float(i) + 0.5f}, {1, 2})}, 1, std::nullopt);
    ASSERT_TRUE(f.ok());
    futures.push_back(std::move(*f));
  }
  for (int i = 0; i < 40; ++i) {
    auto r = futures[i].get();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ((*r)[0].ToDoubleVector(), (std::vector<double>{i * 10.0, i * 10.0 + 5}));
  }
}

TEST(Batcher, EachRequestsFinishRunsOnItsOwnRowsAndFailsItAlone) {
  auto b = Batcher::Create(Policy({1, 2}, 20000), 1, TimesTen);
  ASSERT_TRUE(b.ok()) << b.status();
  RowFinish cut = [](std::vector<Tensor>& out) {
    Tensor first(DType::kFloat32, {1, 1});
    first.SetDouble(0, out[0].GetDouble(0));
    out[0] = first;
    return absl::OkStatus();
  };
  RowFinish refuse = [](std::vector<Tensor>&) { return absl::InternalError("cannot cut"); };
  auto f1 = (*b)->Enqueue({Tensor::FromFloat({1, 2}, {1, 2})}, 1, std::nullopt, nullptr, cut);
  auto f2 = (*b)->Enqueue({Tensor::FromFloat({3, 4}, {1, 2})}, 1, std::nullopt, nullptr, refuse);
  ASSERT_TRUE(f1.ok() && f2.ok());
  auto r1 = f1->get();
  auto r2 = f2->get();
  ASSERT_TRUE(r1.ok()) << r1.status();
  EXPECT_EQ((*r1)[0].ToDoubleVector(), (std::vector<double>{10}));
  EXPECT_EQ(r2.status().message(), "cannot cut");
}

TEST(Batcher, FullQueueIsResourceExhaustedAndStopFailsTheRest) {
  std::atomic<bool> release{false};
  auto blocking = [&](int, const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    out = {in[0]};
    return absl::OkStatus();
  };
  BatchPolicy p = Policy({1}, 0);
  p.max_queue_size = 2;
  auto b = Batcher::Create(p, 1, blocking);
  ASSERT_TRUE(b.ok());
  auto one = [] { return std::vector<Tensor>{Tensor::FromFloat({1}, {1, 1})}; };
  auto running = (*b)->Enqueue(one(), 1, std::nullopt);  // taken by the worker, blocks
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto q1 = (*b)->Enqueue(one(), 1, std::nullopt);
  auto q2 = (*b)->Enqueue(one(), 1, std::nullopt);
  auto q3 = (*b)->Enqueue(one(), 1, std::nullopt);
  ASSERT_TRUE(q1.ok() && q2.ok());
  EXPECT_EQ(q3.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ((*b)->Enqueue(one(), 2, std::nullopt).status().code(),
            absl::StatusCode::kInvalidArgument);  // more rows than the largest bucket
  std::thread stopper([&] { (*b)->Stop(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  release = true;
  stopper.join();
  EXPECT_TRUE(running->get().ok());
  EXPECT_EQ(q1->get().status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ((*b)->Enqueue(one(), 1, std::nullopt).status().code(), absl::StatusCode::kUnavailable);
}

TEST(Batcher, ExpiredRequestNeverReachesTheEngine) {
  std::atomic<int> runs{0};
  auto count = [&](int, const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    ++runs;
    out = {in[0]};
    return absl::OkStatus();
  };
  auto b = Batcher::Create(Policy({1, 2}, 0), 1, count);
  auto f = (*b)->Enqueue({Tensor::FromFloat({1}, {1, 1})}, 1, Clock::now() - microseconds(1));
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->get().status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(runs.load(), 0);
}

// Records which thread ran each batch.
struct ThreadLog {
  std::mutex mu;
  std::vector<std::thread::id> ids;
  BatchRunFn Fn() {
    return [this](int, const std::vector<Tensor>& in, std::vector<Tensor>& out) {
      std::lock_guard<std::mutex> lk(mu);
      ids.push_back(std::this_thread::get_id());
      out = {in[0]};
      return absl::OkStatus();
    };
  }
};

TEST(Batcher, InlineWhenIdleRunsALoneReadyRequestOnTheCaller) {
  ThreadLog log;
  BatchPolicy p = Policy({1, 2}, 0);
  p.inline_when_idle = true;
  auto b = Batcher::Create(p, 1, log.Fn());
  auto f = (*b)->Enqueue({Tensor::FromFloat({7}, {1, 1})}, 1, std::nullopt);
  ASSERT_TRUE(f.ok());
  // Done before Enqueue returned, on this thread.
  EXPECT_EQ(f->wait_for(std::chrono::seconds(0)), std::future_status::ready);
  EXPECT_EQ((*f->get())[0].ToDoubleVector(), (std::vector<double>{7}));
  ASSERT_EQ(log.ids.size(), 1u);
  EXPECT_EQ(log.ids[0], std::this_thread::get_id());
}

TEST(Batcher, InlineWhenIdleStillWaitsForCompanyAndForBusyInstances) {
  ThreadLog log;
  BatchPolicy p = Policy({1, 2}, 20000);  // a partial batch waits 20 ms for company
  p.inline_when_idle = true;
  auto b = Batcher::Create(p, 1, log.Fn());
  auto f = (*b)->Enqueue({Tensor::FromFloat({1}, {1, 1})}, 1, std::nullopt);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  ASSERT_TRUE(f->get().ok());
  ASSERT_EQ(log.ids.size(), 1u);
  EXPECT_NE(log.ids[0], std::this_thread::get_id());  // the worker ran it
  // The only instance is busy (a blocking batch on the worker): Enqueue queues, never blocks.
  std::atomic<bool> release{false};
  BatchPolicy q = Policy({1}, 0);
  q.inline_when_idle = true;
  auto blocking = Batcher::Create(q, 1, [&](int, const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    out = {in[0]};
    return absl::OkStatus();
  });
  std::thread first([&] { (void)(*blocking)->Enqueue({Tensor::FromFloat({1}, {1, 1})}, 1, std::nullopt); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // `first` now runs inline
  auto second = (*blocking)->Enqueue({Tensor::FromFloat({2}, {1, 1})}, 1, std::nullopt);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->wait_for(std::chrono::milliseconds(20)), std::future_status::timeout);
  release = true;
  first.join();
  EXPECT_EQ((*second->get())[0].ToDoubleVector(), (std::vector<double>{2}));
}

TEST(Batcher, StopWaitsForInlineRuns) {
  std::atomic<bool> release{false}, stopped{false};
  BatchPolicy p = Policy({1}, 0);
  p.inline_when_idle = true;
  auto b = Batcher::Create(p, 1, [&](int, const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    out = {in[0]};
    return absl::OkStatus();
  });
  std::thread caller([&] { (void)(*b)->Enqueue({Tensor::FromFloat({1}, {1, 1})}, 1, std::nullopt); });
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  std::thread stopper([&] { (*b)->Stop(); stopped = true; });
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_FALSE(stopped.load());  // the engine is still in use by the caller
  release = true;
  caller.join();
  stopper.join();
  EXPECT_TRUE(stopped.load());
}

TEST(Batcher, CreateValidatesThePolicy) {
  EXPECT_FALSE(Batcher::Create(Policy({}, 0), 1, TimesTen).ok());
  EXPECT_FALSE(Batcher::Create(Policy({4, 2}, 0), 1, TimesTen).ok());
  EXPECT_FALSE(Batcher::Create(Policy({1}, 0), 0, TimesTen).ok());
}

// A fake engine that runs until its stop condition says so (as a long Loop polls CheckStop
// every iteration), then reports how it ended.
absl::Status SpinUntilStopped(int, const std::vector<Tensor>& in, std::vector<Tensor>& out) {
  const auto give_up = Clock::now() + std::chrono::seconds(10);
  while (Clock::now() < give_up) {
    RETURN_IF_ERROR(CheckStop());
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  out = {in[0]};
  return absl::OkStatus();
}

Tensor OneRow() { return Tensor(DType::kFloat32, {1, 1}); }

TEST(Batcher, ABatchEveryoneAbandonedStopsAtItsNextStep) {
  auto b = Batcher::Create(Policy({1}, 0), 1, SpinUntilStopped);
  ASSERT_TRUE(b.ok());
  AbandonFlag flag = std::make_shared<std::atomic<bool>>(false);
  auto f = (*b)->Enqueue({OneRow()}, 1, std::nullopt, flag);
  ASSERT_TRUE(f.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto t0 = Clock::now();
  flag->store(true);
  Batcher::Result r = f->get();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled) << r.status();
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(1));
}

TEST(Batcher, ABatchStopsOnceTheLastDeadlinePasses) {
  auto b = Batcher::Create(Policy({1}, 0), 1, SpinUntilStopped);
  ASSERT_TRUE(b.ok());
  const auto t0 = Clock::now();
  auto f = (*b)->Enqueue({OneRow()}, 1, t0 + std::chrono::milliseconds(100));
  ASSERT_TRUE(f.ok());
  Batcher::Result r = f->get();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(2));
}

TEST(Batcher, ABatchRunsOnWhileOneOfItsRequestsIsStillWaitedFor) {
  // Negative: two requests in one batch, only one abandoned: the run is not stopped (it ends
  // on its own after 10 s; this test stops it by abandoning the other one too, later).
  auto b = Batcher::Create(Policy({2}, 100000), 1, SpinUntilStopped);
  ASSERT_TRUE(b.ok());
  AbandonFlag first = std::make_shared<std::atomic<bool>>(false);
  AbandonFlag second = std::make_shared<std::atomic<bool>>(false);
  auto f1 = (*b)->Enqueue({OneRow()}, 1, std::nullopt, first);
  auto f2 = (*b)->Enqueue({OneRow()}, 1, std::nullopt, second);
  ASSERT_TRUE(f1.ok() && f2.ok());
  first->store(true);
  EXPECT_EQ(f1->wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
  second->store(true);
  EXPECT_EQ(f1->get().status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(f2->get().status().code(), absl::StatusCode::kCancelled);
}

TEST(Batcher, ARunPastTheMemoryBudgetFailsItsBatchAlone) {
  // The batch's tensors are charged to the process budget: an engine that allocates past it
  // fails with RESOURCE_EXHAUSTED, and the next batch runs.
  const int64_t old_cap = ProcessMemory()->cap();
  ProcessMemory()->set_cap(ProcessMemory()->used() + (int64_t{64} << 20));
  auto greedy = [](int, const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    out = {in[0].dim(1) > 1 ? Tensor(DType::kFloat32, {1, int64_t{1} << 27}) : in[0]};
    return absl::OkStatus();
  };
  auto b = Batcher::Create(Policy({1}, 0), 1, greedy);
  ASSERT_TRUE(b.ok());
  auto big = (*b)->Enqueue({Tensor(DType::kFloat32, {1, 2})}, 1, std::nullopt);
  ASSERT_TRUE(big.ok());
  Batcher::Result r = big->get();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
  auto small = (*b)->Enqueue({OneRow()}, 1, std::nullopt);
  ASSERT_TRUE(small.ok());
  EXPECT_TRUE(small->get().ok());
  ProcessMemory()->set_cap(old_cap);
}

}  // namespace
}  // namespace kiln::server

namespace kiln::server {
namespace {

TEST(DecideBatch, AnItemThatRunsAloneIsNeverJoined) {
  QueuedItem alone = Item(2, 0);
  alone.alone = true;
  alone.run_now = true;
  // Behind a waiting item: that item runs without it (and without waiting longer: the batch
  // cannot grow), then it runs by itself.
  BatchDecision d = DecideBatch({Item(1, 0), alone, Item(1, 0)}, kT0, Policy({1, 2, 4}, 1000));
  EXPECT_EQ(d.take, (std::vector<size_t>{0}));
  EXPECT_EQ(d.bucket, 1);
  d = DecideBatch({alone, Item(1, 0)}, kT0, Policy({1, 2, 4}, 1000));
  EXPECT_EQ(d.take, (std::vector<size_t>{0}));
  EXPECT_EQ(d.bucket, 2);
  // Without the flag the two would share a bucket of 4.
  alone.alone = false;
  d = DecideBatch({alone, Item(1, 0)}, kT0, Policy({1, 2, 4}, 1000));
  EXPECT_EQ(d.take, (std::vector<size_t>{0, 1}));
}

// RunHints::append_in_place: such a request runs alone (never batched with a waiting one),
// through the appending run with its own output tensors, at a bucket's size.
TEST(Batcher, AnAppendingRequestRunsAloneThroughTheAppendingRun) {
  std::atomic<int> plain{0}, appending{0};
  auto count_plain = [&](int w, const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    ++plain;
    return TimesTen(w, in, out);
  };
  auto count_appending = [&](int, const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    ++appending;
    if (out.size() != 1 || out[0].shape() != in[0].shape()) {
      return absl::InvalidArgumentError("the caller's outputs did not reach the run");
    }
    out[0].SetDouble(0, 42);  // written in place
    return absl::OkStatus();
  };
  auto b = Batcher::Create(Policy({1, 2, 4}, 50000), 1, count_plain, count_appending);
  ASSERT_TRUE(b.ok()) << b.status();
  // A plain request waits for company (50 ms); the appending one must not join it.
  auto waiting = (*b)->Enqueue({Tensor::FromFloat({1, 2}, {1, 2})}, 1, std::nullopt);
  ASSERT_TRUE(waiting.ok());
  RunHints hints;
  hints.run_now = true;
  hints.append_in_place = true;
  hints.outputs = {Tensor(DType::kFloat32, {2, 2})};
  auto mine = (*b)->Enqueue({Tensor::FromFloat({1, 2, 3, 4}, {2, 2})}, 2, std::nullopt, nullptr,
                            nullptr, hints);
  ASSERT_TRUE(mine.ok()) << mine.status();
  Batcher::Result r = mine->get();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].ToDoubleVector(), (std::vector<double>{42, 0, 0, 0}));
  ASSERT_TRUE(waiting->get().ok());
  EXPECT_EQ(appending.load(), 1);
  EXPECT_EQ(plain.load(), 1);
  // Rows that are no bucket's size are refused (the run would pad them into new outputs).
  auto three = (*b)->Enqueue({Tensor::FromFloat({1, 2, 3, 4, 5, 6}, {3, 2})}, 3, std::nullopt,
                             nullptr, nullptr, hints);
  EXPECT_EQ(three.status().code(), absl::StatusCode::kInvalidArgument) << three.status();
}

TEST(Batcher, AnAppendingRequestWithoutAnAppendingRunIsRefused) {
  auto b = Batcher::Create(Policy({1, 2}, 100), 1, TimesTen);
  ASSERT_TRUE(b.ok()) << b.status();
  RunHints hints;
  hints.append_in_place = true;
  auto f =
      (*b)->Enqueue({Tensor::FromFloat({1, 2}, {1, 2})}, 1, std::nullopt, nullptr, nullptr, hints);
  EXPECT_EQ(f.status().code(), absl::StatusCode::kFailedPrecondition) << f.status();
}

}  // namespace
}  // namespace kiln::server

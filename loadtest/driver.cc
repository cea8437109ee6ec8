#include "loadtest/driver.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <optional>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"

namespace kiln::load {
// Go's codes.Code.String(): the names ghz reports, so its tooling reads ours.
const char* GoCodeName(int code) {
  static const char* kNames[] = {"OK", "Canceled", "Unknown", "InvalidArgument",
                                 "DeadlineExceeded", "NotFound", "AlreadyExists",
                                 "PermissionDenied", "ResourceExhausted", "FailedPrecondition",
                                 "Aborted", "OutOfRange", "Unimplemented", "Internal",
                                 "Unavailable", "DataLoss", "Unauthenticated"};
  return code >= 0 && code < 17 ? kNames[code] : "Unknown";
}

namespace {

using Clock = std::chrono::steady_clock;

// One call in flight; its address is the CompletionQueue tag.
struct Call {
  grpc::ClientContext ctx;
  v1::PredictResponse predict_resp;
  v1::BatchPredictResponse batch_resp;
  inference::ModelInferResponse v2_resp;
  std::unique_ptr<grpc::ClientAsyncResponseReader<v1::PredictResponse>> predict;
  std::unique_ptr<grpc::ClientAsyncResponseReader<v1::BatchPredictResponse>> batch;
  std::unique_ptr<grpc::ClientAsyncResponseReader<inference::ModelInferResponse>> v2;
  grpc::Status status;
  Clock::time_point start;  // the scheduled time (open loop) or the send time (closed loop)
};

// What every thread shares: the plan and the closed loop's request counter.
struct Shared {
  const Options& options;
  const RequestPool& pool;
  int64_t total;                 // 0: until `end`
  Clock::time_point begin, end;  // end is meaningful only when total == 0
  std::atomic<int64_t> issued{0};
};

class Worker {
 public:
  Worker(Shared& shared, int index, int threads)
      : shared_(shared), index_(index), threads_(threads) {
    const int c = shared.options.concurrency;
    cap_ = c / threads + (index < c % threads ? 1 : 0);
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    args.SetMaxSendMessageSize(-1);
    // A distinct argument per thread keeps gRPC from sharing one subchannel (one TCP
    // connection) between the threads' channels.
    args.SetInt("kiln.load.connection", index);
    channel_ = grpc::CreateCustomChannel(shared.options.target, grpc::InsecureChannelCredentials(), args);
    stub_ = v1::InferenceService::NewStub(channel_);
    v2_stub_ = inference::GRPCInferenceService::NewStub(channel_);
  }

  void Run();
  RunResult& result() { return result_; }
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }
  Clock::time_point last_done() const { return last_done_; }

 private:
  std::optional<Clock::time_point> NextDue(Clock::time_point now) const;
  bool Take();
  void Issue(Clock::time_point start);
  void Complete(Call* call);

  Shared& shared_;
  const int index_, threads_;
  int cap_ = 1;
  int64_t inflight_ = 0;
  int64_t ticket_ = 0;  // open loop: this thread's next ticket is index_ + ticket_ * threads_
  uint64_t sent_ = 0;   // picks the pool entry
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::InferenceService::Stub> stub_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> v2_stub_;
  grpc::CompletionQueue cq_;
  RunResult result_;
  Clock::time_point last_done_{};
};

// When this thread's next request is due, or nullopt once it has none left to send.
std::optional<Clock::time_point> Worker::NextDue(Clock::time_point now) const {
  const Shared& s = shared_;
  if (s.options.rps <= 0) {  // closed loop: now, while there is budget
    if (s.total > 0) return s.issued.load(std::memory_order_relaxed) < s.total ? std::optional(now) : std::nullopt;
    return now < s.end ? std::optional(now) : std::nullopt;
  }
  const int64_t n = index_ + ticket_ * threads_;
  if (s.total > 0 && n >= s.total) return std::nullopt;
  const auto due = s.begin + std::chrono::nanoseconds(static_cast<int64_t>(n * 1e9 / s.options.rps));
  if (s.total == 0 && due >= s.end) return std::nullopt;
  return due;
}

// Claims the request NextDue announced (the closed loop's counter is shared).
bool Worker::Take() {
  if (shared_.options.rps > 0) {
    ++ticket_;
    return true;
  }
  if (shared_.total == 0) return true;
  return shared_.issued.fetch_add(1, std::memory_order_relaxed) < shared_.total;
}

void Worker::Issue(Clock::time_point start) {
  auto* call = new Call;
  call->start = start;
  call->ctx.set_deadline(std::chrono::system_clock::now() + shared_.options.timeout);
  const RequestPool& pool = shared_.pool;
  if (shared_.options.protocol == "v2") {
    call->v2 = v2_stub_->AsyncModelInfer(&call->ctx, pool.v2[sent_ % pool.v2.size()], &cq_);
    call->v2->Finish(&call->v2_resp, &call->status, call);
  } else if (shared_.options.call == "batch_predict") {
    call->batch = stub_->AsyncBatchPredict(&call->ctx, pool.batch[sent_ % pool.batch.size()], &cq_);
    call->batch->Finish(&call->batch_resp, &call->status, call);
  } else {
    call->predict = stub_->AsyncPredict(&call->ctx, pool.predict[sent_ % pool.predict.size()], &cq_);
    call->predict->Finish(&call->predict_resp, &call->status, call);
  }
  ++sent_;
  ++inflight_;
}

void Worker::Complete(Call* call) {
  std::unique_ptr<Call> owned(call);
  last_done_ = Clock::now();
  --inflight_;
  RecordCall(result_, std::chrono::nanoseconds(last_done_ - call->start).count(), call->status);
}

// Sends whatever is due (up to the in-flight cap), then waits for an answer or for the next
// due time, whichever comes first; ends when nothing is left to send or to receive.
void Worker::Run() {
  const bool open = shared_.options.rps > 0;
  while (true) {
    std::optional<Clock::time_point> due = NextDue(Clock::now());
    while (due && inflight_ < cap_ && *due <= Clock::now()) {
      if (!Take()) {
        due.reset();
        break;
      }
      Issue(open ? *due : Clock::now());
      due = NextDue(Clock::now());
    }
    if (!due && inflight_ == 0) break;
    // Closed loop or at the cap: only an answer can make progress, so wait without a limit.
    const auto wake = (due && inflight_ < cap_) ? *due : Clock::now() + std::chrono::hours(1);
    void* tag = nullptr;
    bool ok = false;
    const auto st = cq_.AsyncNext(&tag, &ok, std::chrono::system_clock::now() + (wake - Clock::now()));
    if (st == grpc::CompletionQueue::GOT_EVENT) Complete(static_cast<Call*>(tag));
    if (st == grpc::CompletionQueue::SHUTDOWN) break;
  }
  cq_.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (cq_.Next(&tag, &ok)) {}
}

}  // namespace

void RecordCall(RunResult& r, int64_t latency_ns, const grpc::Status& status) {
  const grpc::StatusCode code = status.error_code();
  ++r.count;
  r.latency_sum_ns += static_cast<double>(latency_ns);
  ++r.codes[code];
  std::string error;
  if (code == grpc::StatusCode::OK) {
    r.latencies_ns.push_back(latency_ns);
  } else {
    error = absl::StrCat("rpc error: code = ", GoCodeName(static_cast<int>(code)), " desc = ",
                         status.error_message());
    ++r.errors[error];
  }
  if (r.details.size() < kMaxDetails) {
    // The steady clock's start as wall-clock time: now minus how long ago it was.
    const int64_t unix_now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::system_clock::now().time_since_epoch()).count();
    r.details.push_back({unix_now - latency_ns, latency_ns, static_cast<int>(code), std::move(error)});
  }
}

void MergeInto(RunResult& into, RunResult& from) {
  into.latencies_ns.insert(into.latencies_ns.end(), from.latencies_ns.begin(), from.latencies_ns.end());
  into.count += from.count;
  into.latency_sum_ns += from.latency_sum_ns;
  for (CallDetail& d : from.details) {
    if (into.details.size() < kMaxDetails) into.details.push_back(std::move(d));
  }
  for (auto& [code, n] : from.codes) into.codes[code] += n;
  for (auto& [msg, n] : from.errors) into.errors[msg] += n;
}

RunResult RunPhase(const Options& options, int64_t total, std::chrono::nanoseconds duration,
                   const RequestPool& pool) {
  const int threads = std::max(1, std::min(options.threads, options.concurrency));
  Shared shared{options, pool, total, {}, {}};
  std::vector<std::unique_ptr<Worker>> workers;
  for (int i = 0; i < threads; ++i) workers.push_back(std::make_unique<Worker>(shared, i, threads));
  for (auto& w : workers) {  // connect first, so the first calls do not pay for the handshake
    (void)w->channel()->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(5));
  }
  shared.begin = Clock::now();
  shared.end = shared.begin + duration;
  std::vector<std::thread> running;
  for (auto& w : workers) running.emplace_back([&w] { w->Run(); });
  for (auto& t : running) t.join();
  RunResult merged;
  Clock::time_point last = shared.begin;
  for (auto& w : workers) {
    MergeInto(merged, w->result());
    last = std::max(last, w->last_done());
  }
  merged.total = last - shared.begin;
  return merged;
}

}  // namespace kiln::load

// The load loop: threads each driving async calls on their own CompletionQueue.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "loadtest/options.h"
#include "loadtest/requests.h"

namespace kiln::load {

// One call as ghz's report details it.
struct CallDetail {
  int64_t start_unix_ns = 0;  // when it was sent (or scheduled, open loop)
  int64_t latency_ns = 0;
  int code = 0;               // grpc::StatusCode
  std::string error;          // ghz's "rpc error: ..." text; empty when OK
};

// What one phase measured, counted as ghz counts: the count, rps and average cover every
// call; latencies (percentiles, fastest, slowest, histogram) only the successful ones.
struct RunResult {
  std::vector<int64_t> latencies_ns;           // successful calls
  int64_t count = 0;                           // every call
  double latency_sum_ns = 0;                   // every call
  std::vector<CallDetail> details;             // the first kMaxDetails calls
  std::map<int, int64_t> codes;                // grpc::StatusCode -> calls
  std::map<std::string, int64_t> errors;       // ghz's "rpc error: code = .. desc = .." -> calls
  std::chrono::nanoseconds total{0};           // first send (or schedule) to last answer
};

// ghz keeps at most this many call details in a report.
inline constexpr size_t kMaxDetails = 1000000;

// The name Go's grpc gives a status code ("OK", "DeadlineExceeded", ...), as ghz prints it.
const char* GoCodeName(int code);

// Counts one finished call (`latency_ns` from its start) as ghz does.
void RecordCall(RunResult& r, int64_t latency_ns, const grpc::Status& status);
// Adds `from`'s calls to `into` (details up to kMaxDetails; `from` is left moved from).
void MergeInto(RunResult& into, RunResult& from);

// Runs `total` calls (or for `duration`) per the options: closed loop at `concurrency`, or
// open loop at `rps` when it is set. Warm-up is the caller's business (it runs a phase too).
RunResult RunPhase(const Options& options, int64_t total, std::chrono::nanoseconds duration,
                   const RequestPool& pool);

}  // namespace kiln::load

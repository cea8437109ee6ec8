// Summaries of a run: the text kiln-load prints and ghz's JSON report.
#pragma once

#include <string>

#include "base/json.h"
#include "loadtest/driver.h"

namespace kiln::load {

// Sorts the latencies (the report functions need them sorted).
void Finalize(RunResult& result);

// Nearest-rank percentile of sorted latencies, 0 when there are none.
int64_t Percentile(const std::vector<int64_t>& sorted_ns, double pct);

// count, rps, p50/p90/p95/p99/p99.9 and max of successful calls, errors by code;
// human-readable.
std::string TextReport(const RunResult& result);

// ghz's report, field for field (its Report and Options as it marshals them): count, total,
// average, fastest, slowest, rps (durations in ns), errorDistribution,
// statusCodeDistribution, latencyDistribution, histogram and details. Latency statistics
// cover successful calls only, as ghz computes them; count, average and rps every call.
// A line of JSON (non-finite numbers as null, as Go's encoder would refuse them).
std::string GhzJson(const RunResult& result, const Options& options);
// The same report's members, written into an object the caller has begun (and may extend).
void WriteGhzMembers(json::Writer& w, const RunResult& result, const Options& options);

}  // namespace kiln::load

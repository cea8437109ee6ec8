#include "loadtest/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace kiln::load {
namespace {

double Seconds(int64_t ns) { return static_cast<double>(ns) / 1e9; }

std::string Ms(int64_t ns) { return absl::StrFormat("%.3f ms", static_cast<double>(ns) / 1e6); }

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// Over every call, failed ones too, as ghz averages.
int64_t Average(const RunResult& r) {
  return r.count > 0 ? static_cast<int64_t>(r.latency_sum_ns / static_cast<double>(r.count)) : 0;
}

double Rps(const RunResult& r) {
  return r.total.count() > 0 ? static_cast<double>(r.count) / Seconds(r.total.count()) : 0;
}

// RFC 3339 in UTC with a "Z", as Go's time.Time marshals (nanoseconds when `nanos`).
std::string GoTime(int64_t unix_ns, bool nanos) {
  return absl::FormatTime(nanos ? "%Y-%m-%dT%H:%M:%E*SZ" : "%Y-%m-%dT%H:%M:%SZ",
                          absl::FromUnixNanos(unix_ns), absl::UTCTimeZone());
}

std::string Details(const std::vector<CallDetail>& details) {
  if (details.empty()) return "null";  // Go's nil slice
  std::string out = "[";
  for (size_t i = 0; i < details.size(); ++i) {
    const CallDetail& d = details[i];
    absl::StrAppend(&out, i ? "," : "", R"({"timestamp":")", GoTime(d.start_unix_ns, true),
                    R"(","latency":)", d.latency_ns, R"(,"error":)", JsonString(d.error),
                    R"(,"status":")", GoCodeName(d.code), R"("})");
  }
  return out + "]";
}

// ghz's histogram (the one it inherited from hey): 10 equal buckets from the fastest to the
// slowest call, each counting the calls up to its mark; marks in seconds.
std::string Histogram(const std::vector<int64_t>& sorted) {
  if (sorted.empty()) return "[]";
  constexpr int kBuckets = 10;
  const double fastest = Seconds(sorted.front()), slowest = Seconds(sorted.back());
  const double width = (slowest - fastest) / kBuckets;
  std::vector<double> marks(kBuckets + 1);
  for (int i = 0; i < kBuckets; ++i) marks[i] = fastest + width * i;
  marks[kBuckets] = slowest;
  std::vector<int64_t> counts(kBuckets + 1, 0);
  size_t b = 0;
  for (const int64_t ns : sorted) {
    while (Seconds(ns) > marks[b] && b < marks.size() - 1) ++b;
    ++counts[b];
  }
  std::vector<std::string> items;
  for (int i = 0; i <= kBuckets; ++i) {
    items.push_back(absl::StrFormat(R"({"mark":%.9f,"count":%d,"frequency":%.6f})", marks[i],
                                    counts[i], static_cast<double>(counts[i]) / sorted.size()));
  }
  return "[" + absl::StrJoin(items, ",") + "]";
}

std::string Distribution(const std::map<std::string, int64_t>& m) {
  std::vector<std::string> items;
  for (const auto& [k, n] : m) items.push_back(absl::StrCat(JsonString(k), ":", n));
  return "{" + absl::StrJoin(items, ",") + "}";
}

}  // namespace

void Finalize(RunResult& result) { std::sort(result.latencies_ns.begin(), result.latencies_ns.end()); }

int64_t Percentile(const std::vector<int64_t>& sorted_ns, double pct) {
  if (sorted_ns.empty()) return 0;
  const auto rank = static_cast<size_t>(std::ceil(pct / 100.0 * sorted_ns.size()));
  return sorted_ns[std::clamp<size_t>(rank, 1, sorted_ns.size()) - 1];
}

std::string TextReport(const RunResult& r) {
  const auto& l = r.latencies_ns;
  std::string out = absl::StrFormat("count    %d\ntotal    %.3f s\nrps      %.1f\n", r.count,
                                    Seconds(r.total.count()), Rps(r));
  out += absl::StrCat("average  ", Ms(Average(r)), "\nlatencies of the ", l.size(),
                      " successful calls:\nfastest  ", Ms(l.empty() ? 0 : l.front()), "\n");
  for (const double p : {50.0, 90.0, 95.0, 99.0, 99.9}) {
    out += absl::StrFormat("p%-7s %s\n", absl::StrCat(p), Ms(Percentile(l, p)));
  }
  out += absl::StrCat("max      ", Ms(l.empty() ? 0 : l.back()), "\nstatus codes:\n");
  for (const auto& [code, n] : r.codes) out += absl::StrFormat("  %-18s %d\n", GoCodeName(code), n);
  if (!r.errors.empty()) out += "errors:\n";
  for (const auto& [msg, n] : r.errors) out += absl::StrFormat("  [%d] %s\n", n, msg);
  return out;
}

std::string GhzJson(const RunResult& r, const Options& options) {
  const auto& l = r.latencies_ns;
  std::vector<std::string> dist;
  // ghz's percentages (integers: its Go struct reads them as int), of successful calls.
  for (const int p : {10, 25, 50, 75, 90, 95, 99}) {
    if (!l.empty()) {
      dist.push_back(absl::StrFormat(R"({"percentage":%d,"latency":%d})", p, Percentile(l, p)));
    }
  }
  std::map<std::string, int64_t> codes;
  for (const auto& [code, n] : r.codes) codes[GoCodeName(code)] += n;
  std::string out = "{";
  const int64_t now = absl::ToUnixNanos(absl::Now());
  out += absl::StrFormat(R"("date":%s,"endReason":"normal",)", JsonString(GoTime(now, false)));
  // ghz's Options: "insecure", "binary" and "CPUs" are always present, "qps" when set.
  out += absl::StrFormat(R"("options":{"host":%s,"call":%s,"insecure":true,)",
                         JsonString(options.target),
                         JsonString(options.call == "batch_predict" ? "kiln.v1.InferenceService.BatchPredict"
                                    : options.call == "generate" ? "kiln.v1.GenerationService.Generate"
                                                                 : "kiln.v1.InferenceService.Predict"));
  if (options.total > 0) out += absl::StrFormat(R"("total":%d,)", options.total);
  out += absl::StrFormat(R"("concurrency":%d,)", options.concurrency);
  if (options.rps > 0) out += absl::StrFormat(R"("qps":%d,)", static_cast<int64_t>(options.rps));
  if (options.duration.count() > 0) out += absl::StrFormat(R"("duration":%d,)", options.duration.count());
  out += absl::StrFormat(R"("timeout":%d,"binary":false,"CPUs":%d},)",
                         std::chrono::nanoseconds(options.timeout).count(), options.threads);
  out += absl::StrFormat(R"("count":%d,"total":%d,"average":%d,"fastest":%d,"slowest":%d,"rps":%.3f,)",
                         r.count, r.total.count(), Average(r), l.empty() ? 0 : l.front(),
                         l.empty() ? 0 : l.back(), Rps(r));
  out += absl::StrCat(R"("errorDistribution":)", Distribution(r.errors), ",");
  out += absl::StrCat(R"("statusCodeDistribution":)", Distribution(codes), ",");
  out += absl::StrCat(R"("latencyDistribution":)", l.empty() ? "null" : "[" + absl::StrJoin(dist, ",") + "]", ",");
  out += absl::StrCat(R"("histogram":)", l.empty() ? "null" : Histogram(l), ",");
  out += absl::StrCat(R"("details":)", Details(r.details), "}\n");
  return out;
}

}  // namespace kiln::load

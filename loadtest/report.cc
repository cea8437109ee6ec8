#include "loadtest/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

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

int64_t Average(const std::vector<int64_t>& ns) {
  if (ns.empty()) return 0;
  return static_cast<int64_t>(std::accumulate(ns.begin(), ns.end(), 0.0) / ns.size());
}

double Rps(const RunResult& r) {
  return r.total.count() > 0 ? r.latencies_ns.size() / Seconds(r.total.count()) : 0;
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
  std::string out = absl::StrFormat("count    %d\ntotal    %.3f s\nrps      %.1f\n", l.size(),
                                    Seconds(r.total.count()), Rps(r));
  out += absl::StrCat("average  ", Ms(Average(l)), "\nfastest  ", Ms(l.empty() ? 0 : l.front()), "\n");
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
  // ghz's percentages (integers: its Go struct reads them as int).
  for (const int p : {10, 25, 50, 75, 90, 95, 99}) {
    dist.push_back(absl::StrFormat(R"({"percentage":%d,"latency":%d})", p, Percentile(l, p)));
  }
  std::map<std::string, int64_t> codes;
  for (const auto& [code, n] : r.codes) codes[GoCodeName(code)] += n;
  std::string out = "{";
  out += absl::StrFormat(R"("date":%s,"endReason":"normal",)",
                         JsonString(absl::FormatTime(absl::RFC3339_sec, absl::Now(), absl::UTCTimeZone())));
  out += absl::StrFormat(R"("options":{"call":%s,"host":%s,"concurrency":%d,"rps":%d},)",
                         JsonString(options.call == "batch_predict" ? "kiln.v1.InferenceService.BatchPredict"
                                                                    : "kiln.v1.InferenceService.Predict"),
                         JsonString(options.target), options.concurrency,
                         static_cast<int64_t>(options.rps));  // ghz: an unsigned integer
  out += absl::StrFormat(R"("count":%d,"total":%d,"average":%d,"fastest":%d,"slowest":%d,"rps":%.3f,)",
                         l.size(), r.total.count(), Average(l), l.empty() ? 0 : l.front(),
                         l.empty() ? 0 : l.back(), Rps(r));
  // Not a ghz field (its percentages are integers): the 99.9th percentile, in ns.
  out += absl::StrFormat(R"("latencyP999":%d,)", Percentile(l, 99.9));
  out += absl::StrCat(R"("latencyDistribution":[)", absl::StrJoin(dist, ","), "],");
  out += absl::StrCat(R"("histogram":)", Histogram(l), ",");
  out += absl::StrCat(R"("statusCodeDistribution":)", Distribution(codes), ",");
  out += absl::StrCat(R"("errorDistribution":)", Distribution(r.errors), "}\n");
  return out;
}

}  // namespace kiln::load

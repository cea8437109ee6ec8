#include "loadtest/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace kiln::load {
namespace {

double Seconds(int64_t ns) { return static_cast<double>(ns) / 1e9; }

std::string Ms(int64_t ns) { return absl::StrFormat("%.3f ms", static_cast<double>(ns) / 1e6); }

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

void WriteDetails(json::Writer& w, const std::vector<CallDetail>& details) {
  if (details.empty()) {
    w.Null();  // Go's nil slice
    return;
  }
  w.BeginArray();
  for (const CallDetail& d : details) {
    w.BeginObject().Field("timestamp", GoTime(d.start_unix_ns, true));
    w.Field("latency", d.latency_ns).Field("error", d.error);
    w.Field("status", GoCodeName(d.code)).EndObject();
  }
  w.EndArray();
}

// ghz's histogram (the one it inherited from hey): 10 equal buckets from the fastest to the
// slowest call, each counting the calls up to its mark; marks in seconds.
void WriteHistogram(json::Writer& w, const std::vector<int64_t>& sorted) {
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
  w.BeginArray();
  for (int i = 0; i <= kBuckets; ++i) {
    w.BeginObject().Field("mark", marks[i]).Field("count", counts[i]);
    w.Field("frequency", static_cast<double>(counts[i]) / sorted.size()).EndObject();
  }
  w.EndArray();
}

template <class Map>
void WriteDistribution(json::Writer& w, const Map& m) {
  w.BeginObject();
  for (const auto& [k, n] : m) w.Field(k, static_cast<int64_t>(n));
  w.EndObject();
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

namespace {

// ghz's Options: "insecure", "binary" and "CPUs" are always present, "qps" when set.
void WriteGhzOptions(json::Writer& w, const Options& options) {
  w.Key("options").BeginObject().Field("host", options.target);
  w.Field("call", options.call == "batch_predict" ? "kiln.v1.InferenceService.BatchPredict"
                  : options.call == "generate"    ? "kiln.v1.GenerationService.Generate"
                                                  : "kiln.v1.InferenceService.Predict");
  w.Field("insecure", true);
  if (options.total > 0) w.Field("total", static_cast<int64_t>(options.total));
  w.Field("concurrency", static_cast<int64_t>(options.concurrency));
  if (options.rps > 0) w.Field("qps", static_cast<int64_t>(options.rps));
  if (options.duration.count() > 0) {
    w.Field("duration", static_cast<int64_t>(options.duration.count()));
  }
  w.Field("timeout", static_cast<int64_t>(std::chrono::nanoseconds(options.timeout).count()));
  w.Field("binary", false).Field("CPUs", static_cast<int64_t>(options.threads)).EndObject();
}

}  // namespace

void WriteGhzMembers(json::Writer& w, const RunResult& r, const Options& options) {
  const auto& l = r.latencies_ns;
  w.Field("date", GoTime(absl::ToUnixNanos(absl::Now()), false)).Field("endReason", "normal");
  WriteGhzOptions(w, options);
  w.Field("count", static_cast<int64_t>(r.count));
  w.Field("total", static_cast<int64_t>(r.total.count())).Field("average", Average(r));
  w.Field("fastest", l.empty() ? int64_t{0} : l.front());
  w.Field("slowest", l.empty() ? int64_t{0} : l.back()).Field("rps", Rps(r));
  w.Key("errorDistribution");
  WriteDistribution(w, r.errors);
  std::map<std::string, int64_t> codes;
  for (const auto& [code, n] : r.codes) codes[GoCodeName(code)] += n;
  w.Key("statusCodeDistribution");
  WriteDistribution(w, codes);
  // ghz's percentages (integers: its Go struct reads them as int), of successful calls.
  w.Key("latencyDistribution");
  if (l.empty()) {
    w.Null();
  } else {
    w.BeginArray();
    for (const int p : {10, 25, 50, 75, 90, 95, 99}) {
      w.BeginObject().Field("percentage", int64_t{p}).Field("latency", Percentile(l, p));
      w.EndObject();
    }
    w.EndArray();
  }
  w.Key("histogram");
  if (l.empty()) {
    w.Null();
  } else {
    WriteHistogram(w, l);
  }
  w.Key("details");
  WriteDetails(w, r.details);
}

std::string GhzJson(const RunResult& r, const Options& options) {
  json::Writer w(json::NonFinite::kNull);
  w.BeginObject();
  WriteGhzMembers(w, r, options);
  return w.EndObject().Take() + "\n";
}

}  // namespace kiln::load

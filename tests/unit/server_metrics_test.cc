// The metrics registry: exact exposition text, escaping, concurrency and histogram buckets.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "server/metrics/kiln_metrics.h"
#include "server/metrics/registry.h"

namespace kiln::server::metrics {
namespace {

TEST(Metrics, ExpositionTextIsExact) {
  Registry r;
  auto& requests = r.AddCounter("t_requests_total", "Requests.", {"model", "code"});
  requests.WithLabels({"b", "OK"}).Inc(2);
  requests.WithLabels({"a", "OK"}).Inc();
  r.AddGauge("t_inflight", "In flight.").Get().Set(3);
  auto& lat = r.AddHistogram("t_latency_seconds", "Latency.", {"model"}, {0.1, 1});
  auto& h = lat.WithLabels({"a"});
  h.Observe(0.05);
  h.Observe(0.5);
  h.Observe(7);
  EXPECT_EQ(r.Render(),
            "# HELP t_inflight In flight.\n"
            "# TYPE t_inflight gauge\n"
            "t_inflight 3\n"
            "# HELP t_latency_seconds Latency.\n"
            "# TYPE t_latency_seconds histogram\n"
            "t_latency_seconds_bucket{model=\"a\",le=\"0.1\"} 1\n"
            "t_latency_seconds_bucket{model=\"a\",le=\"1\"} 2\n"
            "t_latency_seconds_bucket{model=\"a\",le=\"+Inf\"} 3\n"
            "t_latency_seconds_sum{model=\"a\"} 7.55\n"
            "t_latency_seconds_count{model=\"a\"} 3\n"
            "# HELP t_requests_total Requests.\n"
            "# TYPE t_requests_total counter\n"
            "t_requests_total{model=\"a\",code=\"OK\"} 1\n"
            "t_requests_total{model=\"b\",code=\"OK\"} 2\n");
}

TEST(Metrics, LabelValuesAndHelpAreEscaped) {
  Registry r;
  r.AddCounter("t_total", "Back\\slash and\nnewline.", {"v"}).WithLabels({"a\"b\\c\nd"}).Inc();
  EXPECT_EQ(r.Render(),
            "# HELP t_total Back\\\\slash and\\nnewline.\n"
            "# TYPE t_total counter\n"
            "t_total{v=\"a\\\"b\\\\c\\nd\"} 1\n");
}

TEST(Metrics, ValuesFormatAsPrometheusParsesThem) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(42), "42");
  EXPECT_EQ(FormatValue(0.1), "0.1");
  EXPECT_EQ(FormatValue(5e-05), "5e-05");
  EXPECT_EQ(FormatValue(1.0 / 0.0), "+Inf");
  EXPECT_EQ(FormatValue(-1.0 / 0.0), "-Inf");
  EXPECT_EQ(FormatValue(0.0 / 0.0), "NaN");
}

TEST(Metrics, ConcurrentIncrementsSum) {
  Registry r;
  auto& family = r.AddCounter("t_total", "x", {"k"});
  auto& gauge = r.AddGauge("t_gauge", "x").Get();
  auto& hist = r.AddHistogram("t_seconds", "x", {}, LatencyBuckets()).Get();
  constexpr int kThreads = 8, kPerThread = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Half the threads resolve the child every time, to race the creation path too.
      Counter& held = family.WithLabels({"same"});
      for (int i = 0; i < kPerThread; ++i) {
        (t % 2 ? held : family.WithLabels({"same"})).Inc();
        gauge.Inc();
        hist.Observe(1e-3 * (i % 100));
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(family.WithLabels({"same"}).Value(), kThreads * kPerThread);
  EXPECT_EQ(gauge.Value(), kThreads * kPerThread);
  EXPECT_EQ(hist.Collect().count, uint64_t{kThreads} * kPerThread);
}

TEST(Metrics, HistogramBucketsAreCumulativeAndInclusive) {
  Registry r;
  auto& h = r.AddHistogram("t_seconds", "x", {}, {1, 2, 4}).Get();
  for (double v : {0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 100.0}) h.Observe(v);
  const Histogram::Snapshot s = h.Collect();
  // le is "less than or equal": 1.0 counts in le="1", 4.0 in le="4".
  EXPECT_EQ(s.cumulative, (std::vector<uint64_t>{2, 4, 6, 7}));
  EXPECT_EQ(s.count, 7u);
  EXPECT_DOUBLE_EQ(s.sum, 112.0);
  for (size_t i = 1; i < s.cumulative.size(); ++i) EXPECT_GE(s.cumulative[i], s.cumulative[i - 1]);
}

TEST(Metrics, LatencyBucketsSpanMicrosecondsToSeconds) {
  const std::vector<double>& b = LatencyBuckets();
  EXPECT_DOUBLE_EQ(b.front(), 50e-6);
  EXPECT_DOUBLE_EQ(b.back(), 10);
  for (size_t i = 1; i < b.size(); ++i) {
    EXPECT_GT(b[i] / b[i - 1], 1.9) << i;
    EXPECT_LE(b[i] / b[i - 1], 2.5) << i;
  }
}

TEST(Metrics, WrongLabelCountIsPaddedNotFatal) {
  Registry r;
  auto& f = r.AddCounter("t_total", "x", {"a", "b"});
  f.WithLabels({"only"}).Inc();
  EXPECT_EQ(f.WithLabels({"only", ""}).Value(), 1);
}

TEST(Metrics, RegisteringTwiceReturnsTheSameFamily) {
  Registry r;
  auto& a = r.AddCounter("t_total", "x", {"k"});
  auto& b = r.AddCounter("t_total", "x", {"k"});
  EXPECT_EQ(&a, &b);
}

TEST(Metrics, KilnFamiliesAreRegistered) {
  EngineCacheResult(true);
  const std::string text = Default().Render();
  for (const char* name :
       {"kiln_request_duration_seconds", "kiln_queue_duration_seconds",
        "kiln_compute_duration_seconds", "kiln_batch_size", "kiln_compile_duration_seconds",
        "kiln_requests_total", "kiln_differential_checks_total", "kiln_engine_cache_requests_total",
        "kiln_inflight_requests", "kiln_queue_depth"}) {
    EXPECT_NE(text.find(std::string("# TYPE ") + name + " "), std::string::npos) << name;
  }
  EXPECT_NE(text.find("kiln_engine_cache_requests_total{result=\"hit\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("kiln_engine_cache_requests_total{result=\"miss\"} 0\n"), std::string::npos);
  EXPECT_GT(ResidentMemoryBytes(), 0);
}

}  // namespace
}  // namespace kiln::server::metrics

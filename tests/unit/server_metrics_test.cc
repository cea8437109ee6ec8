// Kiln's metric families on prometheus-cpp: every family registered from the start, the
// positional label values of the call sites, handles that stay valid, concurrent updates, and
// the exposition text Prometheus reads.
#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

#include <sstream>
#include <thread>
#include <vector>

#include "server/metrics/kiln_metrics.h"
#include "server/model/model_builder.h"

namespace kiln::server::metrics {
namespace {

std::string Text() {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, Default().Collect());
  return out.str();
}

// The value of the sample `name` whose labels include every `label="value"` in `labels`
// (exposition order does not matter); -1 when there is none.
double Sample(const std::string& text, const std::string& name,
              const std::vector<std::string>& labels) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name + "{", 0) != 0 && line.rfind(name + " ", 0) != 0) continue;
    const size_t close = line.rfind(' ');
    const std::string series = line.substr(0, close);
    bool all = true;
    for (const std::string& l : labels) all = all && series.find(l) != std::string::npos;
    if (all) return std::stod(line.substr(close + 1));
  }
  return -1;
}

TEST(Metrics, UnlabeledFamiliesShowFromTheStartAndLabeledOnesOnceUsed) {
  const std::string fresh = Text();
  EXPECT_EQ(Sample(fresh, "kiln_inflight_requests", {}), 0);
  EXPECT_EQ(Sample(fresh, "kiln_engine_cache_requests_total", {"result=\"miss\""}), 0);
  // Negative: a labeled family has no series (so prometheus-cpp writes nothing) until used.
  EXPECT_EQ(fresh.find("kiln_requests_total"), std::string::npos);
  EngineCacheResult(true);
  RecordRequest("m0", "Predict", absl::StatusCode::kOk, std::chrono::milliseconds(1));
  BatcherMetrics batcher("m0", {1});
  batcher.queue_duration().Observe(0.001);
  batcher.batch_size().Observe(1);
  CheckSummary check;
  check.ran = true;
  check.nonfinite_ok = true;
  RecordModelBuild("m0", CheckOutcome(absl::OkStatus(), &check), std::chrono::steady_clock::now());
  ShapeEngineLookup("m0", true);
  ShapeEngineEvicted("m0");
  ShapeEngineBuilt("m0", 0.5);
  const std::string text = Text();
  for (const char* name :
       {"kiln_request_duration_seconds", "kiln_queue_duration_seconds",
        "kiln_compute_duration_seconds", "kiln_batch_size", "kiln_compile_duration_seconds",
        "kiln_requests_total", "kiln_differential_checks_total", "kiln_engine_cache_requests_total",
        "kiln_shape_engine_build_seconds", "kiln_shape_engine_requests_total",
        "kiln_shape_engine_evictions_total", "kiln_inflight_requests", "kiln_queue_depth"}) {
    EXPECT_NE(text.find(std::string("# TYPE ") + name + " "), std::string::npos) << name;
  }
  EXPECT_GE(Sample(text, "kiln_engine_cache_requests_total", {"result=\"hit\""}), 1);
  EXPECT_EQ(Sample(text, "kiln_engine_cache_requests_total", {"result=\"miss\""}), 0);
  EXPECT_EQ(Sample(text, "kiln_inflight_requests", {}), 0);
  EXPECT_GT(ResidentMemoryBytes(), 0);
}

TEST(Metrics, RequestsAreCountedUnderTheirPositionalLabels) {
  RecordRequest("m1", "Predict", absl::StatusCode::kOk, std::chrono::milliseconds(3));
  RecordRequest("m1", "Predict", absl::StatusCode::kNotFound, std::chrono::milliseconds(30));
  const std::string text = Text();
  EXPECT_EQ(Sample(text, "kiln_requests_total",
                   {"model=\"m1\"", "method=\"Predict\"", "code=\"OK\""}), 1);
  EXPECT_EQ(Sample(text, "kiln_requests_total",
                   {"model=\"m1\"", "method=\"Predict\"", "code=\"NOT_FOUND\""}), 1);
  EXPECT_EQ(Sample(text, "kiln_request_duration_seconds_count",
                   {"model=\"m1\"", "method=\"Predict\""}), 2);
  // 3 ms and 30 ms: one in the le="0.005" bucket, both in le="0.05" (buckets are cumulative).
  EXPECT_EQ(Sample(text, "kiln_request_duration_seconds_bucket", {"model=\"m1\"", "le=\"0.005\""}), 1);
  EXPECT_EQ(Sample(text, "kiln_request_duration_seconds_bucket", {"model=\"m1\"", "le=\"0.05\""}), 2);
  EXPECT_EQ(Sample(text, "kiln_request_duration_seconds_bucket", {"model=\"m1\"", "le=\"+Inf\""}), 2);
  // Negative: another model's series is untouched.
  EXPECT_EQ(Sample(text, "kiln_requests_total", {"model=\"m2\""}), -1);
}

TEST(Metrics, BatcherHandlesStayValidAndSumConcurrentUpdates) {
  BatcherMetrics m("m3", {1, 4});
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) {
        m.queue_depth().Increment();
        m.compute_duration(4).Observe(0.001);
        m.compute_duration(16).Observe(0.001);  // a bucket not known at start
      }
    });
  }
  for (auto& t : threads) t.join();
  const std::string text = Text();
  EXPECT_EQ(Sample(text, "kiln_queue_depth", {"model=\"m3\""}), 8000);
  EXPECT_EQ(Sample(text, "kiln_compute_duration_seconds_count", {"model=\"m3\"", "batch=\"4\""}), 8000);
  EXPECT_EQ(Sample(text, "kiln_compute_duration_seconds_count", {"model=\"m3\"", "batch=\"16\""}), 8000);
  EXPECT_EQ(Sample(text, "kiln_compute_duration_seconds_count", {"model=\"m3\"", "batch=\"1\""}), 0);
}

// The outcome label of kiln_differential_checks_total, from what BuildModel returned.
TEST(Metrics, CheckOutcomeNamesEveryBuildResult) {
  const absl::Status ok = absl::OkStatus();
  CheckSummary check;
  EXPECT_EQ(CheckOutcome(ok, &check), nullptr);  // no check ran: no sample
  check.ran = true;
  check.nonfinite_ok = true;
  EXPECT_STREQ(CheckOutcome(ok, &check), "pass");
  check.disabled_passes.insert("fuse_conv_bn");
  EXPECT_STREQ(CheckOutcome(ok, &check), "pass_after_bisect");
  check.nonfinite_ok = false;
  EXPECT_STREQ(CheckOutcome(ok, &check), "pass_finite_only");
  EXPECT_STREQ(CheckOutcome(absl::FailedPreconditionError("check failed"), nullptr), "fail");
  // Negative: a build that failed for another reason ran no check.
  EXPECT_EQ(CheckOutcome(absl::InternalError("compile"), nullptr), nullptr);
}

TEST(Metrics, LatencyBucketsSpanMicrosecondsToSeconds) {
  const std::vector<double>& b = LatencyBuckets();
  ASSERT_FALSE(b.empty());
  EXPECT_DOUBLE_EQ(b.front(), 50e-6);
  EXPECT_DOUBLE_EQ(b.back(), 10);
  for (size_t i = 1; i < b.size(); ++i) {
    EXPECT_GT(b[i], b[i - 1]);
    EXPECT_LE(b[i] / b[i - 1], 2.5 + 1e-9);
  }
}

}  // namespace
}  // namespace kiln::server::metrics

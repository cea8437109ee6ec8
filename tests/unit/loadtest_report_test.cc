// kiln-load's pieces that need no server: the flag parser, the percentiles and the ghz report.
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <grpcpp/grpcpp.h>

#include "loadtest/generate_driver.h"
#include "loadtest/options.h"
#include "loadtest/report.h"

namespace kiln::load {
namespace {

using std::chrono::nanoseconds;

TEST(ParseDuration, ReadsEveryUnitAndBareSeconds) {
  EXPECT_EQ(*ParseDuration("250ms"), nanoseconds(250'000'000));
  EXPECT_EQ(*ParseDuration("1.5s"), nanoseconds(1'500'000'000));
  EXPECT_EQ(*ParseDuration("2m"), nanoseconds(120'000'000'000));
  EXPECT_EQ(*ParseDuration("100us"), nanoseconds(100'000));
  EXPECT_EQ(*ParseDuration("7ns"), nanoseconds(7));
  EXPECT_EQ(*ParseDuration("3"), nanoseconds(3'000'000'000));
}

TEST(ParseDuration, RejectsGarbageAndNegatives) {
  for (const char* bad : {"", "ms", "fast", "-1s", "10 parsecs", "1.2.3s"}) {
    EXPECT_FALSE(ParseDuration(bad).ok()) << bad;
  }
}

TEST(ParseOptions, ReadsBothFlagForms) {
  auto o = ParseOptions({"--target=h:1", "--model", "m", "-c", "8", "-n", "100", "--rps", "50",
                         "--call=batch_predict", "--samples", "4", "--timeout", "250ms"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->target, "h:1");
  EXPECT_EQ(o->model, "m");
  EXPECT_EQ(o->concurrency, 8);
  EXPECT_EQ(o->total, 100);
  EXPECT_DOUBLE_EQ(o->rps, 50);
  EXPECT_EQ(o->call, "batch_predict");
  EXPECT_EQ(o->samples, 4);
  EXPECT_EQ(o->timeout, std::chrono::milliseconds(250));
}

TEST(ParseOptions, NamesTheBadFlag) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--model", "m", "-n", "1", "--frobnicate", "1"}, "unknown flag --frobnicate"},
      {{"--model", "m", "-n"}, "-n needs a value"},
      {{"--model", "m", "-n", "0"}, "-n: bad value '0'"},
      {{"--model", "m", "-n", "1", "-c", "x"}, "-c: bad value 'x'"},
      {{"--model", "m", "-n", "1", "--rps", "-3"}, "--rps: bad value '-3'"},
      {{"--model", "m", "-n", "1", "--call", "stream"}, "--call: predict, batch_predict or generate"},
      {{"--model", "m", "-n", "1", "--call", "generate", "--rps", "5"},
       "--call generate needs --model, a closed loop and --protocol kiln"},
      {{"--model", "m", "-n", "1", "--call", "generate", "--prompt-len", "8,0"},
       "--prompt-len: bad value '0'"},
      {{"--model", "m", "-n", "1", "-z", "1s"}, "-n and -z exclude each other"},
      {{"--model", "m"}, "give -n N or -z DURATION"},
      {{"-n", "1"}, "give --data FILE or --model NAME"},
      {{"--model", "m", "-z", "soon"}, "-z: bad duration 'soon'"},
  };
  for (const auto& [args, message] : cases) {
    auto o = ParseOptions(args);
    ASSERT_FALSE(o.ok()) << message;
    EXPECT_EQ(o.status().message(), message);
  }
}

std::vector<int64_t> OneToHundredValues() {
  std::vector<int64_t> v(100);
  for (int64_t i = 0; i < 100; ++i) v[static_cast<size_t>(i)] = 100 - i;
  return v;
}

TEST(ParseOptions, ReadsTheGenerationFlags) {
  auto o = ParseOptions({"--model", "gpt", "-n", "4", "--call", "generate", "--prompt-len",
                         "32,128", "--max-tokens", "8"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->prompt_lens, (std::vector<int64_t>{32, 128}));
  EXPECT_EQ(o->max_tokens, 8);
  auto d = ParseOptions({"--model", "gpt", "-n", "4", "--call", "generate"});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->prompt_lens, (std::vector<int64_t>{32}));
  EXPECT_EQ(d->max_tokens, 64);
}

TEST(GenerationJson, GivesTokensPerSecondAndPercentiles) {
  GenerationResult r;
  r.run.total = std::chrono::seconds(2);
  r.tokens = 100;
  r.ttft_ns = {5, 1, 3};
  r.itl_ns = OneToHundredValues();
  FinalizeGeneration(r);
  const std::string j = GenerationJson(r);
  google::protobuf::Struct parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(j, &parsed).ok()) << j;
  EXPECT_EQ(parsed.fields().at("tokensPerSecond").number_value(), 50);
  const auto& ttft = parsed.fields().at("timeToFirstToken").struct_value().fields();
  EXPECT_EQ(ttft.at("p50").number_value(), 3);
  EXPECT_EQ(ttft.at("count").number_value(), 3);
  EXPECT_EQ(parsed.fields().at("interToken").struct_value().fields().at("p99").number_value(), 99);
  EXPECT_NE(GenerationText(r).find("50.0 tokens/s"), std::string::npos) << GenerationText(r);
}

std::vector<int64_t> OneToHundred() {
  std::vector<int64_t> v;
  for (int64_t i = 1; i <= 100; ++i) v.push_back(i);
  return v;
}

TEST(Percentile, NearestRank) {
  const auto v = OneToHundred();
  EXPECT_EQ(Percentile(v, 50), 50);
  EXPECT_EQ(Percentile(v, 90), 90);
  EXPECT_EQ(Percentile(v, 99), 99);
  EXPECT_EQ(Percentile(v, 99.9), 100);
  EXPECT_EQ(Percentile(v, 0), 1);
  EXPECT_EQ(Percentile(v, 100), 100);
  EXPECT_EQ(Percentile({}, 50), 0);
  EXPECT_EQ(Percentile({42}, 99.9), 42);
}

google::protobuf::Struct ParseJson(const std::string& text) {
  google::protobuf::Struct s;
  const auto status = google::protobuf::util::JsonStringToMessage(text, &s);
  EXPECT_TRUE(status.ok()) << status.ToString() << "\n" << text;
  return s;
}

// 97 successful calls of 1..97 us and 3 failed ones of 1 ms each.
RunResult SampleRun() {
  RunResult r;
  const std::string error = "rpc error: code = ResourceExhausted desc = queue \"full\"\n";
  for (int64_t i = 1; i <= 100; ++i) {
    const bool ok = i <= 97;
    const int64_t ns = ok ? (98 - i) * 1000 : 1'000'000;  // unsorted
    if (ok) r.latencies_ns.push_back(ns);
    ++r.count;
    r.latency_sum_ns += static_cast<double>(ns);
    r.details.push_back({1'700'000'000'000'000'000 + i, ns,
                         ok ? 0 : static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED),
                         ok ? "" : error});
  }
  r.codes[grpc::StatusCode::OK] = 97;
  r.codes[grpc::StatusCode::RESOURCE_EXHAUSTED] = 3;
  r.errors[error] = 3;
  r.total = std::chrono::milliseconds(50);
  Finalize(r);
  return r;
}

TEST(GhzJson, CountsAsGhzDoes) {
  Options options;
  options.concurrency = 4;
  options.total = 100;
  const auto json = ParseJson(GhzJson(SampleRun(), options));
  const auto& f = json.fields();
  // count, rps and average over every call...
  EXPECT_EQ(f.at("count").number_value(), 100);
  EXPECT_EQ(f.at("total").number_value(), 50e6);
  EXPECT_NEAR(f.at("rps").number_value(), 2000, 1e-6);
  EXPECT_EQ(f.at("average").number_value(), (97 * 98 / 2 * 1000 + 3 * 1'000'000) / 100);
  // ...latencies over the successful ones only: the failed 1 ms calls are not the slowest.
  EXPECT_EQ(f.at("fastest").number_value(), 1000);
  EXPECT_EQ(f.at("slowest").number_value(), 97000);
  const auto& dist = f.at("latencyDistribution").list_value().values();
  ASSERT_EQ(dist.size(), 7);
  EXPECT_EQ(dist[2].struct_value().fields().at("percentage").number_value(), 50);
  EXPECT_EQ(dist[2].struct_value().fields().at("latency").number_value(), 49000);
  double histogram_total = 0;
  for (const auto& bucket : f.at("histogram").list_value().values()) {
    histogram_total += bucket.struct_value().fields().at("count").number_value();
  }
  EXPECT_EQ(histogram_total, 97);
  const auto& codes = f.at("statusCodeDistribution").struct_value().fields();
  EXPECT_EQ(codes.at("OK").number_value(), 97);
  EXPECT_EQ(codes.at("ResourceExhausted").number_value(), 3);
  // The error text keeps its quotes and newline through JSON escaping.
  const auto& errors = f.at("errorDistribution").struct_value().fields();
  EXPECT_EQ(errors.at("rpc error: code = ResourceExhausted desc = queue \"full\"\n").number_value(), 3);
  EXPECT_FALSE(f.contains("latencyP999"));
}

TEST(GhzJson, OptionsDateAndDetailsAreGhzs) {
  Options options;
  options.rps = 250;
  options.threads = 2;
  const auto json = ParseJson(GhzJson(SampleRun(), options));
  const auto& f = json.fields();
  const std::string date = f.at("date").string_value();
  EXPECT_EQ(date.back(), 'Z') << date;
  const auto& o = f.at("options").struct_value().fields();
  EXPECT_EQ(o.at("qps").number_value(), 250);
  EXPECT_FALSE(o.contains("rps"));
  EXPECT_TRUE(o.at("insecure").bool_value());
  EXPECT_FALSE(o.at("binary").bool_value());
  EXPECT_EQ(o.at("CPUs").number_value(), 2);
  const auto& details = f.at("details").list_value().values();
  ASSERT_EQ(details.size(), 100);
  const auto& last = details[99].struct_value().fields();
  EXPECT_EQ(last.at("status").string_value(), "ResourceExhausted");
  EXPECT_EQ(last.at("latency").number_value(), 1'000'000);
  EXPECT_NE(last.at("error").string_value().find("queue"), std::string::npos);
  EXPECT_EQ(details[0].struct_value().fields().at("error").string_value(), "");
  EXPECT_EQ(details[0].struct_value().fields().at("timestamp").string_value().back(), 'Z');
}

TEST(GhzJson, AnEmptyRunIsStillValidJson) {
  RunResult empty;
  const auto json = ParseJson(GhzJson(empty, Options{}));
  EXPECT_EQ(json.fields().at("count").number_value(), 0);
  EXPECT_EQ(json.fields().at("rps").number_value(), 0);
  EXPECT_TRUE(json.fields().at("histogram").has_null_value());
  EXPECT_TRUE(json.fields().at("details").has_null_value());
}

TEST(TextReport, PrintsPercentilesAndCodes) {
  const std::string text = TextReport(SampleRun());
  EXPECT_NE(text.find("count    100\n"), std::string::npos) << text;
  EXPECT_NE(text.find("p50      0.049 ms"), std::string::npos) << text;
  EXPECT_NE(text.find("p99.9    0.097 ms"), std::string::npos) << text;
  EXPECT_NE(text.find("ResourceExhausted  3"), std::string::npos) << text;
}

TEST(GoCodeName, MatchesGoNamesAndGuardsTheRange) {
  EXPECT_STREQ(GoCodeName(0), "OK");
  EXPECT_STREQ(GoCodeName(4), "DeadlineExceeded");
  EXPECT_STREQ(GoCodeName(16), "Unauthenticated");
  EXPECT_STREQ(GoCodeName(17), "Unknown");
  EXPECT_STREQ(GoCodeName(-1), "Unknown");
}

}  // namespace
}  // namespace kiln::load

// The KServe v2 pieces that need no server: the JSON reader/writer (limits, numbers, escapes,
// malformed input), the tensor codecs for every datatype (raw, typed contents, JSON) with
// their refusals, classification, the v2 version strings, the HTTP status mapping, the
// bearer-token rule, the /v2 admission lane, and the per-version statistics.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "base/json.h"
#include "server/common/auth.h"
#include "server/http/http_kserve.h"
#include "server/http/http_listener.h"
#include "server/serving/inference.h"
#include "server/serving/kserve_tensor.h"
#include "server/serving/model_stats.h"

namespace kiln::server {
namespace {

using ::testing::HasSubstr;

json::Value ParseOk(std::string_view text) {
  auto v = json::Parse(text);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : json::Value();
}

std::string ErrorOf(const absl::Status& s) { return std::string(s.message()); }

TEST(Json, ParsesEveryKindAndKeepsNumbersAsText) {
  const json::Value v = ParseOk(
      R"( {"a": [1, -2.5e3, true, false, null], "s": "x\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00",
          "big": 18446744073709551615, "o": {}} )");
  ASSERT_TRUE(v.is_object());
  const json::Value* a = v.Find("a");
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(a->items().size(), 5u);
  EXPECT_EQ(a->items()[1].text(), "-2.5e3");
  EXPECT_TRUE(a->items()[2].boolean());
  EXPECT_TRUE(a->items()[4].is_null());
  EXPECT_EQ(v.Find("s")->text(), "x\"\\/\b\f\n\r\t\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_EQ(*json::AsUInt64(*v.Find("big"), "big"), std::numeric_limits<uint64_t>::max());
  EXPECT_FALSE(json::AsInt64(*v.Find("big"), "big").ok());  // above INT64
  EXPECT_EQ(*json::AsDouble(a->items()[1], "a"), -2500.0);
  EXPECT_EQ(v.Find("missing"), nullptr);
}

TEST(Json, NonFiniteNumbersRoundTrip) {
  const json::Value v = ParseOk("[NaN, Infinity, -Infinity, 2e308, -2e308]");
  ASSERT_EQ(v.items().size(), 5u);
  EXPECT_TRUE(std::isnan(*json::AsDouble(v.items()[0], "x")));
  EXPECT_EQ(*json::AsDouble(v.items()[1], "x"), HUGE_VAL);
  EXPECT_EQ(*json::AsDouble(v.items()[2], "x"), -HUGE_VAL);
  // Rounding past the largest double saturates; an exponent past its range is refused.
  EXPECT_EQ(*json::AsDouble(v.items()[3], "x"), HUGE_VAL);
  EXPECT_EQ(*json::AsDouble(v.items()[4], "x"), -HUGE_VAL);
  EXPECT_EQ(json::Parse("1e999").status().code(), absl::StatusCode::kInvalidArgument);
  json::Writer w;
  w.BeginArray().Float(NAN).Double(-INFINITY).Float(0.1f).Double(0.1).Int(-3).UInt(7).EndArray();
  EXPECT_EQ(w.text(), "[NaN,-Infinity,0.1,0.1,-3,7]");
}

TEST(Json, RefusesMalformedTextSayingWhere) {
  for (const char* bad : {"",
                          "{",
                          "[1,]",
                          "{\"a\" 1}",
                          "[1 2]",
                          "\"abc",
                          "tru",
                          "01",
                          "1.",
                          "-",
                          "[1]x",
                          "\"\\q\"",
                          "\"\\ud800\"",
                          "\"\\udc00\"",
                          "{1: 2}",
                          "\"a\tb\"",
                          "{\"\\udc00\": 1}",
                          "Inf",
                          "-NaN",
                          "[Infinity.5]",
                          "nan"}) {
    auto v = json::Parse(bad);
    ASSERT_FALSE(v.ok()) << bad;
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(ErrorOf(v.status()), HasSubstr("malformed JSON at byte")) << bad;
  }
  // A NUL byte would end the text early for a reader of C strings: refused where it stands.
  auto nul = json::Parse(std::string("[1]\0[2]", 7));
  ASSERT_FALSE(nul.ok());
  EXPECT_THAT(ErrorOf(nul.status()), HasSubstr("at byte 3"));
  auto twice = json::Parse(R"({"a": {"b": 1, "b": 2}})");
  ASSERT_FALSE(twice.ok());
  EXPECT_THAT(ErrorOf(twice.status()), HasSubstr("member 'b' appears twice"));
}

TEST(Json, DepthIsBounded) {
  const std::string deep = std::string(40, '[') + std::string(40, ']');
  EXPECT_TRUE(json::Parse(deep, {64}).ok());
  auto v = json::Parse(deep, {32});
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(ErrorOf(v.status()), HasSubstr("nested deeper than 32"));
  // Far deeper than any stack: refused at the limit, not by crashing.
  EXPECT_FALSE(json::Parse(std::string(1 << 20, '['), {32}).ok());
}

TEST(Json, WriterEscapesAndSeparates) {
  json::Writer w;
  w.BeginObject().Key("a\"b").String("x\ny\x01").Key("l").BeginArray().Bool(true).Null();
  w.BeginObject().EndObject().EndArray().EndObject();
  EXPECT_EQ(w.text(), R"({"a\"b":"x\ny\u0001","l":[true,null,{}]})");
}

TEST(KServeTensor, DataTypeNamesRoundTrip) {
  for (const char* name : {"BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32",
                           "INT64", "FP16", "BF16", "FP32", "FP64"}) {
    auto t = kserve::ParseDataType(name, "input 'x'");
    ASSERT_TRUE(t.ok()) << name;
    EXPECT_EQ(kserve::DataTypeName(*t), name);
    EXPECT_NE(kserve::ConfigDataType(*t), inference::TYPE_INVALID) << name;
  }
  EXPECT_THAT(ErrorOf(kserve::ParseDataType("BYTES", "input 'x'").status()),
              HasSubstr("numeric tensors only"));
  EXPECT_THAT(ErrorOf(kserve::ParseDataType("FLOAT", "input 'x'").status()),
              HasSubstr("unknown datatype 'FLOAT'"));
  EXPECT_EQ(kserve::DataTypeName(DType::kFloat8E4M3FN), "");
}

TEST(KServeTensor, RawBytesAreCheckedAgainstTheShapeAndViewedWhenAligned) {
  auto owner = std::make_shared<std::string>(std::string(24, '\0'));
  auto t = kserve::FromRawBytes(DType::kFloat32, {2, 3}, owner, *owner, "input 'x'");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->raw(), owner->data());  // no copy
  // Misaligned for the dtype: copied.
  auto odd = kserve::FromRawBytes(DType::kFloat32, {1}, owner,
                                  std::string_view(*owner).substr(1, 4), "input 'x'");
  ASSERT_TRUE(odd.ok());
  EXPECT_NE(odd->raw(), owner->data() + 1);
  EXPECT_THAT(
      ErrorOf(kserve::FromRawBytes(DType::kFloat32, {2, 4}, owner, *owner, "input 'x'").status()),
      HasSubstr("24 bytes of data, FP32[2,4] needs 32"));
  // A shape alone never makes the server allocate.
  EXPECT_THAT(
      ErrorOf(kserve::FromRawBytes(DType::kFloat32, {1 << 30, 1 << 30}, owner, *owner, "input 'x'")
                  .status()),
      HasSubstr("shape too large"));
  EXPECT_THAT(
      ErrorOf(kserve::FromRawBytes(DType::kFloat32, {-1}, owner, *owner, "input 'x'").status()),
      HasSubstr("negative dim"));
}

TEST(KServeTensor, TypedContentsForEveryDatatypeThatHasAField) {
  inference::InferTensorContents c;
  c.add_int_contents(-128);
  c.add_int_contents(127);
  auto i8 = kserve::FromContents(DType::kInt8, {2}, c, "input 'x'");
  ASSERT_TRUE(i8.ok()) << i8.status();
  EXPECT_EQ(i8->GetInt(0), -128);
  c.set_int_contents(1, 128);
  EXPECT_THAT(ErrorOf(kserve::FromContents(DType::kInt8, {2}, c, "input 'x'").status()),
              HasSubstr("element 1 (128) is out of the INT8 range"));
  EXPECT_TRUE(kserve::FromContents(DType::kInt16, {2}, c, "input 'x'").ok());

  inference::InferTensorContents u;
  u.add_uint_contents(65535);
  EXPECT_TRUE(kserve::FromContents(DType::kUInt16, {1}, u, "input 'x'").ok());
  EXPECT_FALSE(kserve::FromContents(DType::kUInt8, {1}, u, "input 'x'").ok());
  u.clear_uint_contents();
  u.add_uint64_contents(std::numeric_limits<uint64_t>::max());
  auto u64 = kserve::FromContents(DType::kUInt64, {1}, u, "input 'x'");
  ASSERT_TRUE(u64.ok());
  EXPECT_EQ(u64->GetUInt(0), std::numeric_limits<uint64_t>::max());

  inference::InferTensorContents f;
  f.add_fp32_contents(1.5f);
  EXPECT_THAT(ErrorOf(kserve::FromContents(DType::kFloat64, {1}, f, "input 'x'").status()),
              HasSubstr("contents.fp32_contents does not match datatype FP64 (use fp64_contents)"));
  EXPECT_THAT(ErrorOf(kserve::FromContents(DType::kFloat16, {1}, f, "input 'x'").status()),
              HasSubstr("FP16 has no contents field"));
  EXPECT_THAT(ErrorOf(kserve::FromContents(DType::kFloat32, {2}, f, "input 'x'").status()),
              HasSubstr("has 1 elements, shape [2] needs 2"));
  EXPECT_THAT(ErrorOf(kserve::FromContents(DType::kFloat32, {1}, {}, "input 'x'").status()),
              HasSubstr("no data"));
  inference::InferTensorContents b;
  b.add_bool_contents(true);
  auto bt = kserve::FromContents(DType::kBool, {1}, b, "input 'x'");
  ASSERT_TRUE(bt.ok());
  EXPECT_EQ(bt->data<uint8_t>()[0], 1);
  EXPECT_TRUE(kserve::HasContents(b));
  EXPECT_FALSE(kserve::HasContents({}));
}

TEST(KServeTensor, JsonDataFlatOrNestedForEveryDatatype) {
  const json::Value nested = ParseOk("[[1, 2], [3, 4]]");
  for (DType t : {DType::kUInt8, DType::kUInt16, DType::kUInt32, DType::kUInt64, DType::kInt8,
                  DType::kInt16, DType::kInt32, DType::kInt64, DType::kFloat16, DType::kBFloat16,
                  DType::kFloat32, DType::kFloat64}) {
    auto v = kserve::FromJsonData(t, {2, 2}, nested, "input 'x'");
    ASSERT_TRUE(v.ok()) << DTypeName(t) << v.status();
    EXPECT_EQ(v->GetDouble(3), 4.0) << DTypeName(t);
  }
  auto b = kserve::FromJsonData(DType::kBool, {2}, ParseOk("[true, false]"), "input 'x'");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->data<uint8_t>()[0], 1);
  EXPECT_THAT(
      ErrorOf(kserve::FromJsonData(DType::kBool, {1}, ParseOk("[1]"), "input 'x'").status()),
      HasSubstr("BOOL data must be true or false"));
  EXPECT_THAT(
      ErrorOf(kserve::FromJsonData(DType::kInt32, {1}, ParseOk("[1.5]"), "input 'x'").status()),
      HasSubstr("expected an integer"));
  EXPECT_THAT(
      ErrorOf(kserve::FromJsonData(DType::kUInt8, {1}, ParseOk("[-1]"), "input 'x'").status()),
      HasSubstr("non-negative integer"));
  EXPECT_THAT(
      ErrorOf(kserve::FromJsonData(DType::kUInt8, {1}, ParseOk("[256]"), "input 'x'").status()),
      HasSubstr("out of the UINT8 range"));
  EXPECT_THAT(ErrorOf(kserve::FromJsonData(DType::kFloat32, {3}, nested, "input 'x'").status()),
              HasSubstr("data has 4 elements, shape [3] needs 3"));
  EXPECT_THAT(
      ErrorOf(kserve::FromJsonData(DType::kFloat32, {1}, ParseOk("[{}]"), "input 'x'").status()),
      HasSubstr("holds an object"));
  EXPECT_THAT(
      ErrorOf(kserve::FromJsonData(DType::kFloat32, {1}, ParseOk("3"), "input 'x'").status()),
      HasSubstr("must be an array"));
}

TEST(KServeTensor, OutputsAsRawBytesAndJson) {
  Tensor t = Tensor::FromFloat({0.5f, -1.0f});
  const kserve::Output o = kserve::NumericOutput("y", t);
  EXPECT_EQ(o.datatype, "FP32");
  std::string raw;
  kserve::AppendRawBytes(o, &raw);
  EXPECT_EQ(raw.size(), kserve::RawByteSize(o));
  EXPECT_EQ(std::memcmp(raw.data(), t.raw(), 8), 0);
  json::Writer w;
  kserve::WriteJsonData(o, w);
  EXPECT_EQ(w.text(), "[0.5,-1]");
  Tensor u(DType::kUInt64, {1});
  u.SetUInt(0, std::numeric_limits<uint64_t>::max());
  json::Writer wu;
  kserve::WriteJsonData(kserve::NumericOutput("u", u), wu);
  EXPECT_EQ(wu.text(), "[18446744073709551615]");
}

TEST(KServeTensor, ClassificationTakesTheTopClassesPerRow) {
  Tensor t = Tensor::FromFloat({0.1f, 0.7f, 0.2f, 0.3f, 0.3f, NAN}, {2, 3});
  auto c = kserve::Classify("p", t, 2, /*batched=*/true);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->datatype, "BYTES");
  EXPECT_EQ(c->shape, (std::vector<int64_t>{2, 2}));
  // Highest first; ties keep the lower index; NaN last.
  EXPECT_EQ(c->strings,
            (std::vector<std::string>{"0.700000:1", "0.200000:2", "0.300000:0", "0.300000:1"}));
  std::string raw;
  kserve::AppendRawBytes(*c, &raw);
  EXPECT_EQ(raw.substr(0, 4), std::string("\x0a\0\0\0", 4));
  EXPECT_EQ(raw.size(), kserve::RawByteSize(*c));
  auto all = kserve::Classify("p", t, 10, /*batched=*/false);  // clamped to the class count
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->shape, (std::vector<int64_t>{6}));
  EXPECT_FALSE(kserve::Classify("p", t, 0, true).ok());
}

TEST(KServe, VersionStrings) {
  EXPECT_EQ(*ParseVersion(""), std::nullopt);
  EXPECT_EQ(*ParseVersion("12"), 12);
  // "01" as the repository reads folder names: not version 1.
  for (const char* bad : {"0", "01", "-1", "1.0", "x", " 1", "99999999999999999999"}) {
    EXPECT_EQ(ParseVersion(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(KServe, HttpStatusOfEveryCode) {
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kOk), 200);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kInvalidArgument), 400);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kUnauthenticated), 401);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kPermissionDenied), 403);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kNotFound), 404);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kResourceExhausted), 429);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kUnimplemented), 501);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kUnavailable), 503);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kDeadlineExceeded), 504);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kInternal), 500);
}

TEST(KServe, BearerToken) {
  EXPECT_TRUE(CheckBearer("", std::nullopt).ok());
  EXPECT_EQ(CheckBearer("t0k", std::nullopt).code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(CheckBearer("t0k", "Bearer t0").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(CheckBearer("t0k", "Bearer t0kk").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(CheckBearer("t0k", "Bearer t0k").ok());
  // The scheme is case-insensitive and may be followed by several spaces (RFC 9110, 11.4).
  EXPECT_TRUE(CheckBearer("t0k", "bearer t0k").ok());
  EXPECT_TRUE(CheckBearer("t0k", "BEARER   t0k").ok());
  EXPECT_EQ(CheckBearer("t0k", "Bearert0k").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(CheckBearer("t0k", "Basic t0k").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(CheckBearer("t0k", "Bearer t0k ").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(CheckBearer("t0k", "").code(), absl::StatusCode::kPermissionDenied);
}

TEST(HttpAdmission, V2RequestsMayCarryLargeBodies) {
  HttpLimits limits;
  limits.max_request_bytes = 1024;
  limits.max_body_bytes = 1 << 20;
  const std::string big =
      "POST /v2/models/m/infer HTTP/1.1\r\nContent-Length: 100000\r\n"
      "Expect: 100-Continue\r\n\r\n";
  RequestHead h = ParseRequestHead(big, limits);
  EXPECT_TRUE(h.head_done);
  EXPECT_EQ(h.lane, Lane::kApi);
  EXPECT_EQ(h.state, RequestState::kIncomplete);
  EXPECT_EQ(h.body_bytes, 100000u);
  EXPECT_TRUE(h.expect_continue);
  EXPECT_EQ(ParseRequestHead(big + std::string(100000, 'x'), limits).state,
            RequestState::kComplete);
  // The same body elsewhere is a probe's: too large.
  std::string probe = big;
  probe.replace(5, 18, "/healthz");
  EXPECT_EQ(ParseRequestHead(probe, limits).state, RequestState::kTooLarge);
  EXPECT_EQ(ParseRequestHead("POST /v2 HTTP/1.1\r\nContent-Length: 2000000\r\n\r\n", limits).state,
            RequestState::kTooLarge);
  // Heads stay small on every lane.
  const std::string long_head = "GET /v2 HTTP/1.1\r\nX: " + std::string(2000, 'a') + "\r\n\r\n";
  EXPECT_EQ(ParseRequestHead(long_head, limits).state, RequestState::kTooLarge);
  EXPECT_EQ(LaneOf("GET /v2 HTTP/1.1"), Lane::kApi);
  EXPECT_EQ(LaneOf("GET /v2/health/live HTTP/1.1"), Lane::kApi);
  EXPECT_EQ(LaneOf("GET /v2?x HTTP/1.1"), Lane::kApi);
  EXPECT_EQ(LaneOf("GET /v20 HTTP/1.1"), Lane::kProbe);
  EXPECT_EQ(LaneOf("GET /metrics HTTP/1.1"), Lane::kProbe);
  // Generation holds its worker while tokens come: a lane of its own, an API lane still.
  for (const char* r :
       {"POST /v2/models/gpt/generate HTTP/1.1", "POST /v2/models/gpt/generate_stream HTTP/1.1",
        "POST /v2/models/gpt/versions/3/generate_stream?x=1 HTTP/1.1"}) {
    EXPECT_EQ(LaneOf(r), Lane::kGenerate) << r;
  }
  for (const char* r :
       {"POST /v2/models/gpt/infer HTTP/1.1", "POST /v2/models/generate HTTP/1.1",
        "GET /v2/models/gpt/generate/ready HTTP/1.1", "POST /v2/generate HTTP/1.1"}) {
    EXPECT_EQ(LaneOf(r), Lane::kApi) << r;
  }
  EXPECT_EQ(LaneOf("POST /models/gpt/generate HTTP/1.1"), Lane::kProbe);
  EXPECT_TRUE(IsApiLane(Lane::kGenerate));
  limits.max_body_bytes = 1 << 20;
  EXPECT_EQ(ParseRequestHead(
                "POST /v2/models/m/generate HTTP/1.1\r\nContent-Length: 500000\r\n\r\n", limits)
                .state,
            RequestState::kIncomplete)
      << "a generation request's body may be an API body's size";
}

TEST(ModelStats, CountsRequestsRowsAndExecutionsPerBucket) {
  ModelStats s({1, 4});
  s.RecordRequest(true, std::chrono::microseconds(30), 3);
  s.RecordRequest(false, std::chrono::microseconds(5), 2);  // rows of failures do not count
  s.RecordQueued(std::chrono::microseconds(7));
  s.RecordExecution(4, std::chrono::microseconds(20));
  s.RecordExecution(3, std::chrono::microseconds(1));  // not a bucket: total only
  const ModelStats::Snapshot r = s.Read();
  EXPECT_EQ(r.success.count, 1u);
  EXPECT_EQ(r.success.ns, 30000u);
  EXPECT_EQ(r.fail.count, 1u);
  EXPECT_EQ(r.inference_count, 3u);
  EXPECT_EQ(r.execution_count, 2u);
  EXPECT_EQ(r.queue.ns, 7000u);
  ASSERT_EQ(r.batches.size(), 1u);
  EXPECT_EQ(r.batches[0].first, 4);
  EXPECT_EQ(r.batches[0].second.ns, 20000u);
  EXPECT_GT(r.last_inference_ms, 0u);
}

}  // namespace
}  // namespace kiln::server

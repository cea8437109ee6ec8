#include <gtest/gtest.h>

#include <cmath>

#include "base/json.h"
#include "runtime/check/compare.h"
#include "runtime/check/differential.h"
#include "tools/kiln/dim_flag.h"

namespace kiln::tools {
namespace {

TEST(Compare, WithinToleranceIsOk) {
  Tensor a = Tensor::FromFloat({1.0f, 2.0f, 3.0f});
  Tensor e = Tensor::FromFloat({1.0f, 2.001f, 3.0f});
  check::Divergence c = check::CompareTensors(a, e, {1e-3, 1e-7});
  EXPECT_TRUE(c.ok) << c.message;
  EXPECT_NEAR(c.max_abs_err, 0.001, 1e-6);
}

TEST(Compare, BeyondToleranceFailsAndNamesElement) {
  Tensor a = Tensor::FromFloat({1.0f, 2.1f});
  Tensor e = Tensor::FromFloat({1.0f, 2.0f});
  check::Divergence c = check::CompareTensors(a, e, {1e-3, 1e-7});
  EXPECT_FALSE(c.ok);
  EXPECT_NE(c.message.find("element 1"), std::string::npos) << c.message;
}

TEST(Compare, NormRelativeErrorIsTheTensorsRelativeError) {
  // ||(0.1, 0, 0.2)|| / ||(3, 4, 0)|| = sqrt(0.05) / 5.
  const Tensor e = Tensor::FromFloat({3.0f, 4.0f, 0.0f});
  check::Divergence c = check::CompareTensors(Tensor::FromFloat({3.1f, 4.0f, 0.2f}), e, {1, 1});
  EXPECT_TRUE(c.ok);
  EXPECT_NEAR(c.norm_rel_err, std::sqrt(0.05) / 5, 1e-6);
  EXPECT_EQ(check::CompareTensors(e, e, {0, 0}).norm_rel_err, 0.0);
  // Any error against an all-zero reference is infinitely relative.
  EXPECT_TRUE(std::isinf(check::CompareTensors(Tensor::FromFloat({1.0f}), Tensor::FromFloat({0.0f}), {1, 1}).norm_rel_err));
}

TEST(Compare, NanMatchesNanOnly) {
  Tensor a = Tensor::FromFloat({NAN, 1.0f});
  EXPECT_TRUE(check::CompareTensors(a, Tensor::FromFloat({NAN, 1.0f}), {0, 0}).ok);
  EXPECT_FALSE(check::CompareTensors(a, Tensor::FromFloat({0.0f, 1.0f}), {0, 0}).ok);
  EXPECT_FALSE(check::CompareTensors(Tensor::FromFloat({INFINITY}), Tensor::FromFloat({-INFINITY}), {1, 1}).ok);
}

TEST(Compare, DtypeAndShapeMismatchFail) {
  Tensor f = Tensor::FromFloat({1.0f, 2.0f});
  EXPECT_FALSE(check::CompareTensors(f, Tensor::FromInt64({1, 2}), {1, 1}).ok);
  EXPECT_FALSE(check::CompareTensors(f, f.Reshaped({2, 1}), {1, 1}).ok);
}

TEST(Compare, Int64IsExactBeyondDoublePrecision) {
  Tensor a = Tensor::FromInt64({(int64_t{1} << 60) + 1});
  Tensor e = Tensor::FromInt64({int64_t{1} << 60});
  EXPECT_FALSE(check::CompareTensors(a, e, {0, 0}).ok);
}

TEST(CompareOutputs, NamesTheFirstBadOutputAndKeepsTheMaxima) {
  ref::TensorMap want = {{"a", Tensor::FromFloat({1.0f, 2.0f})},
                         {"ids", Tensor::FromInt64({int64_t{1} << 40})}};
  ref::TensorMap got = {{"a", Tensor::FromFloat({1.0f, 2.0005f})},
                        {"ids", Tensor::FromInt64({(int64_t{1} << 40) + 1})}};
  check::Divergence d = check::CompareOutputs(want, got, {1e-3, 1e-4});
  EXPECT_FALSE(d.ok);  // the id is off by one: integers compare exactly
  EXPECT_EQ(d.message.rfind("output 'ids': element 0", 0), 0u) << d.message;
  EXPECT_NEAR(d.max_abs_err, 1.0, 1e-9);
  got["ids"] = want["ids"];
  d = check::CompareOutputs(want, got, {1e-3, 1e-4});
  EXPECT_TRUE(d.ok) << d.message;
  EXPECT_NEAR(d.max_rel_err, 0.00025, 1e-6);
  got.erase("a");
  EXPECT_EQ(check::CompareOutputs(want, got, {}).message, "output 'a' missing");
}

TEST(DimFlag, ParsesNameEqualsSizeAndRejectsTheRest) {
  shape::InputDims d;
  ASSERT_TRUE(AddDimFlag("sequence=128", d).ok());
  EXPECT_EQ(d.symbols.at("sequence"), 128);
  EXPECT_FALSE(AddDimFlag("sequence=64", d).ok());  // given twice
  ASSERT_TRUE(AddDimFlag("past=0", d).ok());        // an empty dim: a decoder's first step
  EXPECT_EQ(d.symbols.at("past"), 0);
  for (const char* bad : {"sequence", "=4", "h=-3", "h=4x", "h="}) {
    EXPECT_FALSE(AddDimFlag(bad, d).ok()) << bad;
  }
}

TEST(BindFlag, NumbersAndBoolsAndItsRefusals) {
  std::map<std::string, std::vector<double>> b;
  ASSERT_TRUE(AddBindFlag("use_cache_branch=true", b).ok());
  ASSERT_TRUE(AddBindFlag("scale=0.5,-2,false", b).ok());
  EXPECT_EQ(b.at("use_cache_branch"), std::vector<double>{1.0});
  EXPECT_EQ(b.at("scale"), (std::vector<double>{0.5, -2.0, 0.0}));
  EXPECT_FALSE(AddBindFlag("scale=1", b).ok());  // given twice
  for (const char* bad : {"x", "=1", "x=", "x=1,", "x=yes", "x=nan", "x=1e999"}) {
    EXPECT_FALSE(AddBindFlag(bad, b).ok()) << bad;
  }
}

// Tool reports are read by strict parsers (JSON.parse in the bench scripts): a non-finite
// number is null there, where the v2 REST API writes NaN.
TEST(JsonWriter, ToolReportsWriteNonFiniteAsNull) {
  json::Writer w(json::NonFinite::kNull);
  w.BeginObject();
  w.Field("name", "a\"b\n");
  w.Key("list");
  w.BeginArray();
  w.Int(1);
  w.Double(0.5);
  w.Double(NAN);
  w.Float(-INFINITY);
  w.EndArray();
  w.EndObject();
  EXPECT_EQ(w.text(), R"({"name":"a\"b\n","list":[1,0.5,null,null]})");
  json::Writer names;
  names.BeginArray().Double(NAN).EndArray();
  EXPECT_EQ(names.text(), "[NaN]");
}

}  // namespace
}  // namespace kiln::tools

#include <cmath>

#include <gtest/gtest.h>

#include "tools/kiln/compare.h"
#include "tools/kiln/json_writer.h"

namespace kiln::tools {
namespace {

TEST(Compare, WithinToleranceIsOk) {
  Tensor a = Tensor::FromFloat({1.0f, 2.0f, 3.0f});
  Tensor e = Tensor::FromFloat({1.0f, 2.001f, 3.0f});
  Comparison c = CompareTensors(a, e, 1e-3, 1e-7);
  EXPECT_TRUE(c.ok) << c.message;
  EXPECT_NEAR(c.max_abs_err, 0.001, 1e-6);
}

TEST(Compare, BeyondToleranceFailsAndNamesElement) {
  Tensor a = Tensor::FromFloat({1.0f, 2.1f});
  Tensor e = Tensor::FromFloat({1.0f, 2.0f});
  Comparison c = CompareTensors(a, e, 1e-3, 1e-7);
  EXPECT_FALSE(c.ok);
  EXPECT_NE(c.message.find("element 1"), std::string::npos) << c.message;
}

TEST(Compare, NanMatchesNanOnly) {
  Tensor a = Tensor::FromFloat({NAN, 1.0f});
  EXPECT_TRUE(CompareTensors(a, Tensor::FromFloat({NAN, 1.0f}), 0, 0).ok);
  EXPECT_FALSE(CompareTensors(a, Tensor::FromFloat({0.0f, 1.0f}), 0, 0).ok);
  EXPECT_FALSE(CompareTensors(Tensor::FromFloat({INFINITY}), Tensor::FromFloat({-INFINITY}), 1, 1).ok);
}

TEST(Compare, DtypeAndShapeMismatchFail) {
  Tensor f = Tensor::FromFloat({1.0f, 2.0f});
  EXPECT_FALSE(CompareTensors(f, Tensor::FromInt64({1, 2}), 1, 1).ok);
  EXPECT_FALSE(CompareTensors(f, f.Reshaped({2, 1}), 1, 1).ok);
}

TEST(Compare, Int64IsExactBeyondDoublePrecision) {
  Tensor a = Tensor::FromInt64({(int64_t{1} << 60) + 1});
  Tensor e = Tensor::FromInt64({int64_t{1} << 60});
  EXPECT_FALSE(CompareTensors(a, e, 0, 0).ok);
}

TEST(JsonWriter, WritesNestedStructuresWithEscaping) {
  JsonWriter w;
  w.BeginObject();
  w.Field("name", "a\"b\n");
  w.Key("list");
  w.BeginArray();
  w.Int(1);
  w.Number(0.5);
  w.Number(NAN);
  w.EndArray();
  w.EndObject();
  EXPECT_EQ(w.str(), R"({"name":"a\"b\n","list":[1,0.5,null]})");
}

}  // namespace
}  // namespace kiln::tools

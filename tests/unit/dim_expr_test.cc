// Dims written as expressions of other symbols (compiler/shape/dim_expr.h): parsing,
// evaluation and its errors, and binding them through BindInputDims and Specialize.
#include "compiler/shape/dim_expr.h"

#include <gtest/gtest.h>

#include "compiler/shape/bind_dims.h"
#include "compiler/shape/infer.h"
#include "ir/builder.h"

namespace kiln::shape {
namespace {

TEST(DimExpr, ParsesSumsAndProductsOfSymbolsAndIntegers) {
  EXPECT_TRUE(IsDimExpr("past_sequence_length + 1"));
  EXPECT_TRUE(IsDimExpr("past+sequence"));
  EXPECT_TRUE(IsDimExpr("2 * heads"));
  EXPECT_FALSE(IsDimExpr("sequence"));  // a plain symbol
  EXPECT_FALSE(IsDimExpr("12"));
  EXPECT_FALSE(IsDimExpr("past +"));
  EXPECT_FALSE(IsDimExpr("a / 2"));
  EXPECT_FALSE(IsDimExpr(""));
  EXPECT_EQ(DimExprSymbols("past + sequence - past"), (std::vector<std::string>{"past", "sequence"}));
  const std::map<std::string, int64_t> v{{"past", 7}, {"sequence", 3}, {"heads", 12}};
  EXPECT_EQ(*EvalDimExpr("past + 1", v), 8);
  EXPECT_EQ(*EvalDimExpr("past + sequence", v), 10);
  EXPECT_EQ(*EvalDimExpr("2 * heads - sequence * 2", v), 18);
}

TEST(DimExpr, AMissingSymbolANegativeValueOrBadTextIsAnError) {
  const std::map<std::string, int64_t> v{{"past", 1}};
  auto missing = EvalDimExpr("past + sequence", v);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("'sequence' has no value"), std::string::npos);
  EXPECT_FALSE(EvalDimExpr("past - 2", v).ok());
  EXPECT_FALSE(EvalDimExpr("past ++ 1", v).ok());
  EXPECT_FALSE(EvalDimExpr("past 1", v).ok());
}

// mask [batch, "past + 1"] beside past [batch, past]: binding past binds the mask.
TEST(DimExpr, BindingASymbolBindsTheExpressionsOfIt) {
  GraphBuilder b;
  Value* past = b.Input("past", DType::kFloat32, {Dim::Symbol("batch"), Dim::Symbol("past")});
  Value* mask = b.Input("mask", DType::kFloat32, {Dim::Symbol("batch"), Dim::Symbol("past + 1")});
  Value* one = b.Constant("one", Tensor::FromFloat({0.f}, {1, 1}));
  b.Output(b.Op("Add", {b.Op("Concat", {past, one}, {{"axis", Attribute::Int(1)}}), mask}));
  std::unique_ptr<Graph> g = b.Build();
  std::unique_ptr<Graph> bound = g->Clone();
  InputDims dims;
  dims.symbols = {{"past", 5}};
  ASSERT_TRUE(BindInputDims(*bound, dims).ok());
  EXPECT_EQ((*bound->inputs[1]->shape)[1].value, 6);
  std::unique_ptr<Graph> spec = g->Clone();
  ASSERT_TRUE(Specialize(*spec, 1, {{"past", 9}}).ok());
  EXPECT_EQ((*spec->inputs[1]->shape)[1].value, 10);
  EXPECT_EQ(ShapeToString(*spec->outputs[0]->shape), "[1,10]");
  // "past + 1" is no symbol of its own: only its name is.
  InputDims wrong;
  wrong.symbols = {{"past + 1", 5}};
  EXPECT_FALSE(BindInputDims(*g->Clone(), wrong).ok());
}

}  // namespace
}  // namespace kiln::shape

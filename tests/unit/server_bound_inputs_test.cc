// Inputs bound at load (server/model/bound_inputs.h): the config's bind_inputs become
// constants of the graph in every type they can take, a merged decoder's use_cache_branch is
// bound to true unless generation is off or the config says otherwise, the cache key follows
// what decides the binding, and every input that cannot be bound is INVALID_ARGUMENT naming it.
#include <gtest/gtest.h>

#include "ir/builder.h"
#include "server/model/bound_inputs.h"

namespace kiln::server {
namespace {

// x [2, 3] float, n [2] int64, use_cache_branch [1] bool, s [batch] float; y = x.
std::unique_ptr<Graph> Model() {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 3});
  b.Input("n", DType::kInt64, {2});
  b.Input(kUseCacheBranch, DType::kBool, {1});
  b.Input("s", DType::kFloat32, Shape{Dim::Symbol("batch")});
  b.Output(b.Op("Identity", {x}));
  return b.Build();
}

std::vector<std::string> InputNames(const Graph& g) {
  std::vector<std::string> names;
  for (const Value* v : g.inputs) names.push_back(v->name);
  return names;
}

TEST(BoundInputs, AMergedDecodersSwitchIsBoundToItsCacheBranch) {
  std::unique_ptr<Graph> g = Model();
  absl::StatusOr<std::vector<std::string>> lines = BindInputs(*g, ModelConfig{});
  ASSERT_TRUE(lines.ok()) << lines.status();
  ASSERT_EQ(lines->size(), 1u);
  EXPECT_NE((*lines)[0].find("use_cache_branch = true"), std::string::npos) << (*lines)[0];
  EXPECT_EQ(InputNames(*g), (std::vector<std::string>{"x", "n", "s"}));
  const Value* v = g->FindValue(kUseCacheBranch);
  ASSERT_TRUE(v->is_constant());
  EXPECT_EQ(v->constant->shape(), std::vector<int64_t>{1});
  EXPECT_EQ(v->constant->GetInt(0), 1);
}

TEST(BoundInputs, GenerationOffOrTheConfigDecidesTheSwitch) {
  ModelConfig off;
  off.generation.mode = "off";
  std::unique_ptr<Graph> g = Model();
  ASSERT_TRUE(BindInputs(*g, off).ok());
  EXPECT_EQ(g->inputs.size(), 4u) << "generation off: the input stays the caller's";
  ModelConfig first;
  first.bind_inputs[kUseCacheBranch] = {0.0};
  g = Model();
  ASSERT_TRUE(BindInputs(*g, first).ok());
  EXPECT_EQ(g->FindValue(kUseCacheBranch)->constant->GetInt(0), 0);
  // The cache key changes with each of them.
  EXPECT_NE(BoundInputsKey(ModelConfig{}), BoundInputsKey(off));
  EXPECT_NE(BoundInputsKey(ModelConfig{}), BoundInputsKey(first));
}

TEST(BoundInputs, ValuesFillTheInputInItsType) {
  ModelConfig c;
  c.bind_inputs["x"] = {0.5};
  c.bind_inputs["n"] = {3, -4};
  std::unique_ptr<Graph> g = Model();
  ASSERT_TRUE(BindInputs(*g, c).ok());
  const Tensor& x = *g->FindValue("x")->constant;
  ASSERT_EQ(x.shape(), (std::vector<int64_t>{2, 3}));
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(x.GetDouble(i), 0.5);
  const Tensor& n = *g->FindValue("n")->constant;
  EXPECT_EQ(n.dtype(), DType::kInt64);
  EXPECT_EQ(n.GetInt(0), 3);
  EXPECT_EQ(n.GetInt(1), -4);
  EXPECT_EQ(InputNames(*g), (std::vector<std::string>{"s"}));
}

TEST(BoundInputs, WhatCannotBeBoundIsInvalidArgumentNamingTheInput) {
  struct Case {
    std::string name;
    std::vector<double> values;
    std::string says;
  };
  for (const Case& k :
       std::vector<Case>{{"nope", {1}, "not an input of the model (its inputs: x, n"},
                         {"s", {1}, "symbolic dims"},
                         {"x", {1, 2}, "give 1 value or 6, not 2"},
                         {"n", {1.5}, "1.5 is no integer"}}) {
    SCOPED_TRACE(k.name);
    ModelConfig c;
    c.bind_inputs[k.name] = k.values;
    std::unique_ptr<Graph> g = Model();
    absl::StatusOr<std::vector<std::string>> r = BindInputs(*g, c);
    ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
    EXPECT_NE(r.status().message().find("'" + k.name + "'"), std::string::npos) << r.status();
    EXPECT_NE(r.status().message().find(k.says), std::string::npos) << r.status();
  }
}

}  // namespace
}  // namespace kiln::server

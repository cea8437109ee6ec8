// inline_constant_if: an If whose condition is constant becomes the nodes of the branch it
// takes (the reference before and after, captures, constants, the If's output values kept,
// nested Ifs, a condition that shape folding makes constant), the CPU engine then runs the
// model with no fallback, and the Ifs the pass must leave stay.
#include "compiler/passes/inline_constant_if.h"

#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <optional>

#include "compiler/compile.h"
#include "compiler/onnx/importer.h"
#include "runtime/cpu/cpu_engine.h"
#include "tests/unit/onnx_proto_builder.h"
#include "tests/unit/pass_test_util.h"

namespace kiln::passes {
namespace {

using testing::CountOps;

constexpr int kFloat = onnx::TensorProto::FLOAT, kBool = onnx::TensorProto::BOOL;

using testing::AddInput;
using testing::AddNode;
using testing::Branch;

void BoolInitializer(onnx::GraphProto* g, const std::string& name, bool v) {
  auto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(kBool);
  t->add_dims(1);
  t->add_int32_data(v ? 1 : 0);
}

// x [2, 3], k [3]. y = If(c) then (Relu(x + k), x) else (x * k, k); `t` is also a value of
// the outer graph (a name the branch reuses), `z = y + t` reads the If's output after it.
// `cond` is "c" (a graph input or a constant named c) or "" for a shape test that folding
// makes constant (Size(x) == 6).
onnx::ModelProto IfModel(const std::string& cond, std::optional<bool> constant) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  AddInput(g, "x", kFloat, {2, 3});
  AddInput(g, "k", kFloat, {3});
  if (constant) {
    BoolInitializer(g, "c", *constant);
  } else if (!cond.empty()) {
    AddInput(g, "c", kBool, {1});
  }
  std::string c = cond;
  if (cond.empty()) {
    auto* six = g->add_initializer();
    six->set_name("six");
    six->set_data_type(onnx::TensorProto::INT64);
    six->add_int64_data(6);
    AddNode(g, "Size", {"x"}, {"size"});
    AddNode(g, "Equal", {"size", "six"}, {"is6"});
    c = "is6";
  }
  AddNode(g, "Neg", {"x"}, {"t"});
  auto* node = AddNode(g, "If", {c}, {"y", "passed"});
  auto* then_g = Branch(node, "then_branch");
  AddNode(then_g, "Add", {"x", "k"}, {"t"});  // the outer graph has a `t` too
  AddNode(then_g, "Relu", {"t"}, {"r"});
  then_g->add_output()->set_name("r");
  then_g->add_output()->set_name("x");  // a capture as a branch output
  auto* else_g = Branch(node, "else_branch");
  AddNode(else_g, "Mul", {"x", "k"}, {"e"});
  else_g->add_output()->set_name("e");
  else_g->add_output()->set_name("k");
  AddNode(g, "Add", {"y", "t"}, {"z"});
  g->add_output()->set_name("z");
  g->add_output()->set_name("y");
  g->add_output()->set_name("passed");
  return m;
}

ref::TensorMap Feed() {
  return {{"x", Tensor::FromFloat({1, -2, 3, -4, 5, -6}, {2, 3})},
          {"k", Tensor::FromFloat({0.5f, 1.5f, -2.5f}, {3})}};
}

std::unique_ptr<Graph> Import(const onnx::ModelProto& m) {
  auto g = onnx_io::ImportModel(m);
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? std::move(*g) : nullptr;
}

TEST(InlineConstantIf, TheTakenBranchReplacesTheIf) {
  for (bool c : {true, false}) {
    SCOPED_TRACE(c);
    std::unique_ptr<Graph> g = Import(IfModel("c", c));
    ASSERT_TRUE(g);
    EXPECT_TRUE(testing::RunPassAndCompare(*g, InlineConstantIf, Feed()));
    EXPECT_EQ(CountOps(*g, "If"), 0);
    // The If's output value is written by the branch's last node, under its name.
    const Value* y = g->FindValue("y");
    ASSERT_TRUE(y && y->producer);
    EXPECT_EQ(y->producer->op_type, c ? "Relu" : "Mul");
    EXPECT_TRUE(g->IsGraphOutput(y));
    // A capture (or constant) as a branch output is copied by an Identity.
    const Value* passed = g->FindValue("passed");
    ASSERT_TRUE(passed && passed->producer);
    EXPECT_EQ(passed->producer->op_type, "Identity");
    EXPECT_EQ(passed->producer->input(0)->name, c ? "x" : "k");
  }
}

TEST(InlineConstantIf, AConditionShapeFoldingMakesConstantIsInlined) {
  std::unique_ptr<Graph> g = Import(IfModel("", std::nullopt));
  ASSERT_TRUE(g);
  EXPECT_TRUE(testing::RunPassAndCompare(*g, InlineConstantIf, Feed()));
  EXPECT_EQ(CountOps(*g, "If"), 0);
  EXPECT_EQ(CountOps(*g, "Relu"), 1);
}

TEST(InlineConstantIf, NestedIfsAreInlinedToo) {
  onnx::ModelProto m = IfModel("c", true);
  // The then branch's Relu becomes If(c2) then Relu(t) else Neg(t), c2 a constant of the
  // outer graph: captured twice over.
  BoolInitializer(m.mutable_graph(), "c2", false);
  onnx::GraphProto* then_g = m.mutable_graph()->mutable_node(1)->mutable_attribute(0)->mutable_g();
  then_g->mutable_node()->RemoveLast();
  auto* inner = AddNode(then_g, "If", {"c2"}, {"r"});
  AddNode(Branch(inner, "then_branch"), "Relu", {"t"}, {"ir"})->set_name("inner_relu");
  inner->mutable_attribute(0)->mutable_g()->add_output()->set_name("ir");
  AddNode(Branch(inner, "else_branch"), "Neg", {"t"}, {"in"});
  inner->mutable_attribute(1)->mutable_g()->add_output()->set_name("in");
  std::unique_ptr<Graph> g = Import(m);
  ASSERT_TRUE(g);
  EXPECT_TRUE(testing::RunPassAndCompare(*g, InlineConstantIf, Feed()));
  EXPECT_EQ(CountOps(*g, "If"), 0);
  EXPECT_EQ(g->FindValue("y")->producer->op_type, "Neg");
}

TEST(InlineConstantIf, TheCpuEngineRunsTheInlinedBranchWithNoFallback) {
  std::unique_ptr<Graph> g = Import(IfModel("c", true));
  ASSERT_TRUE(g);
  CompileOptions co;
  co.pipeline.level = OptLevel::kO2;
  absl::StatusOr<CompiledGraph> compiled = CompileGraph(*g, co);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  EXPECT_EQ(CountOps(*compiled->graph, "If"), 0);
  absl::StatusOr<std::unique_ptr<runtime::Engine>> e = cpu::BuildCpuEngine(*compiled, {});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ((*e)->info().fallback_ops, 0);
  const ref::TensorMap feeds = Feed();
  absl::StatusOr<ref::TensorMap> want = ref::Run(*g, feeds);
  ASSERT_TRUE(want.ok()) << want.status();
  std::vector<Tensor> ins, outs;
  for (const auto& spec : (*e)->inputs()) ins.push_back(feeds.at(spec.name));
  ASSERT_TRUE((*e)->Run(ins, outs).ok());
  for (size_t i = 0; i < outs.size(); ++i) {
    const Tensor& w = want->at((*e)->outputs()[i].name);
    ASSERT_EQ(outs[i].shape(), w.shape());
    for (int64_t j = 0; j < w.numel(); ++j) EXPECT_FLOAT_EQ(outs[i].GetDouble(j), w.GetDouble(j));
  }
}

TEST(InlineConstantIf, LeavesAnIfWhoseConditionIsNotConstant) {
  std::unique_ptr<Graph> g = Import(IfModel("c", std::nullopt));
  ASSERT_TRUE(g);
  ref::TensorMap feed = Feed();
  Tensor c(DType::kBool, {1});
  c.SetInt(0, 1);
  feed["c"] = c;
  EXPECT_FALSE(testing::RunPassAndCompare(*g, InlineConstantIf, feed));
  EXPECT_EQ(CountOps(*g, "If"), 1);
}

TEST(InlineConstantIf, LeavesAConditionOfSeveralElements) {
  onnx::ModelProto m = IfModel("c", true);
  m.mutable_graph()->mutable_initializer(0)->set_dims(0, 2);
  m.mutable_graph()->mutable_initializer(0)->add_int32_data(1);
  std::unique_ptr<Graph> g = Import(m);
  ASSERT_TRUE(g);
  absl::StatusOr<bool> changed = InlineConstantIf(*g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_FALSE(*changed);
  EXPECT_EQ(CountOps(*g, "If"), 1);
}

}  // namespace
}  // namespace kiln::passes

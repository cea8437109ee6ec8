// Control flow (If, Loop, Scan): bodies imported with their captures, shape inference through
// them, the reference running them, export round trips (with a capture renamed by a pass),
// and the failure modes: bad conditions, mismatched scan lengths, a loop that never ends.
#include <gtest/gtest.h>

#include <chrono>

#include "base/stop.h"
#include "compiler/onnx/exporter.h"
#include "compiler/onnx/importer.h"
#include "compiler/passes/eliminate_identity.h"
#include "compiler/shape/infer.h"
#include "ops/interpreter.h"
#include "tests/unit/onnx_proto_builder.h"

namespace kiln {
namespace {

using testing::AddInput;
using testing::AddNode;
using testing::AddOutput;
using testing::GraphAttr;

constexpr int kFloat = onnx::TensorProto::FLOAT, kBool = onnx::TensorProto::BOOL,
              kInt64 = onnx::TensorProto::INT64;

// y = If(c) then (x + k) else (x * k), both branches reading x and k from outside; x comes
// through an Identity (so eliminate_identity renames the capture's outer value).
onnx::ModelProto IfModel() {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  AddInput(g, "c", kBool, {});
  AddInput(g, "x0", kFloat, {3});
  AddInput(g, "k", kFloat, {3});
  AddNode(g, "Identity", {"x0"}, {"x"});
  auto* node = AddNode(g, "If", {"c"}, {"y"});
  auto* then_g = GraphAttr(node, "then_branch")->mutable_g();
  AddNode(then_g, "Add", {"x", "k"}, {"t"});
  AddOutput(then_g, "t");
  auto* else_g = GraphAttr(node, "else_branch")->mutable_g();
  AddNode(else_g, "Mul", {"x", "k"}, {"e"});
  AddOutput(else_g, "e");
  AddOutput(g, "y");
  return m;
}

ref::TensorMap IfFeed(bool c) {
  return {{"c", Tensor::Scalar(DType::kBool, c)},
          {"x0", Tensor::FromFloat({1, 2, 3}, {3})},
          {"k", Tensor::FromFloat({10, 20, 30}, {3})}};
}

TEST(ControlFlow, IfReadsCapturesAndInfersItsShape) {
  auto g = onnx_io::ImportModel(IfModel());
  ASSERT_TRUE(g.ok()) << g.status();
  const Node& n = *(*g)->nodes().back();
  ASSERT_EQ(n.op_type, "If");
  EXPECT_EQ(n.captures, (std::vector<std::string>{"k", "x"}));  // sorted
  EXPECT_EQ(n.inputs.size(), 3u);  // cond, then the captures
  ASSERT_TRUE(shape::InferShapes(**g).ok());
  ASSERT_TRUE((*g)->outputs[0]->shape.has_value());
  EXPECT_EQ(*(*g)->outputs[0]->shape, Shape{Dim(3)});
  for (bool c : {true, false}) {
    auto out = ref::Run(**g, IfFeed(c));
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_FLOAT_EQ(out->at("y").data<float>()[2], c ? 33.f : 90.f);
  }
}

TEST(ControlFlow, ExportBridgesACaptureAnOuterPassRenamed) {
  auto g = onnx_io::ImportModel(IfModel());
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(passes::EliminateIdentity(**g).ok());  // x is now x0 outside, still x inside
  const Node& n = *(*g)->nodes().back();
  EXPECT_EQ(n.inputs[2]->name, "x0");  // the capture known as x inside
  auto proto = onnx_io::ExportModel(**g);
  ASSERT_TRUE(proto.ok()) << proto.status();
  auto again = onnx_io::ImportModel(*proto);
  ASSERT_TRUE(again.ok()) << again.status();
  for (bool c : {true, false}) {
    auto out = ref::Run(**again, IfFeed(c));
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_FLOAT_EQ(out->at("y").data<float>()[0], c ? 11.f : 10.f);
  }
}

TEST(ControlFlow, IfRefusesAConditionOfSeveralElements) {
  auto g = onnx_io::ImportModel(IfModel());
  ASSERT_TRUE(g.ok());
  ref::TensorMap feed = IfFeed(true);
  (*g)->inputs[0]->shape.reset();
  feed["c"] = Tensor(DType::kBool, {2});
  auto out = ref::Run(**g, feed);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << out.status();
}

// Loop(M or cond, s) with body: s' = s + x (x captured), scan output s'.
onnx::ModelProto LoopModel(bool with_trip_count) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  AddInput(g, "s0", kFloat, {2});
  AddInput(g, "x", kFloat, {2});
  auto* trips = g->add_initializer();
  trips->set_name("M");
  trips->set_data_type(kInt64);
  trips->add_int64_data(4);
  auto* cond = g->add_initializer();
  cond->set_name("go");
  cond->set_data_type(kBool);
  cond->add_int32_data(1);
  // A trip count and no condition (so the count is known), or a condition that stays true
  // and no trip count (a loop that never ends).
  auto* node = AddNode(g, "Loop", {with_trip_count ? "M" : "", with_trip_count ? "" : "go", "s0"},
                       {"s", "all"});
  auto* body = GraphAttr(node, "body")->mutable_g();
  AddInput(body, "i", kInt64, {});
  AddInput(body, "c_in", kBool, {});
  AddInput(body, "s_in", kFloat, {2});
  AddNode(body, "Identity", {"c_in"}, {"c_out"});
  AddNode(body, "Add", {"s_in", "x"}, {"s_out"});
  AddNode(body, "Identity", {"s_out"}, {"scan"});
  AddOutput(body, "c_out");
  AddOutput(body, "s_out");
  AddOutput(body, "scan");
  AddOutput(g, "s");
  AddOutput(g, "all");
  return m;
}

TEST(ControlFlow, LoopCarriesStacksAndInfersTheTripCount) {
  auto g = onnx_io::ImportModel(LoopModel(true));
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE(shape::InferShapes(**g).ok());
  EXPECT_EQ(*(*g)->outputs[1]->shape, (Shape{Dim(4), Dim(2)}));
  auto out = ref::Run(**g, {{"s0", Tensor::FromFloat({0, 1}, {2})}, {"x", Tensor::FromFloat({1, 2}, {2})}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_FLOAT_EQ(out->at("s").data<float>()[1], 9.f);  // 1 + 4 * 2
  ASSERT_EQ(out->at("all").shape(), (std::vector<int64_t>{4, 2}));
  EXPECT_FLOAT_EQ(out->at("all").data<float>()[0], 1.f);
  EXPECT_FLOAT_EQ(out->at("all").data<float>()[6], 4.f);
}

// Without a trip count and with a condition that stays true, the loop would never end: the
// reference polls the stop scope every iteration, so a deadline ends it.
TEST(ControlFlow, ALoopThatNeverEndsIsStoppedByItsDeadline) {
  auto g = onnx_io::ImportModel(LoopModel(false));
  ASSERT_TRUE(g.ok()) << g.status();
  StopScope stop({std::chrono::steady_clock::now() + std::chrono::milliseconds(100), nullptr, "test"});
  auto out = ref::Run(**g, {{"s0", Tensor::FromFloat({0, 1}, {2})}, {"x", Tensor::FromFloat({1, 2}, {2})}});
  EXPECT_EQ(out.status().code(), absl::StatusCode::kDeadlineExceeded) << out.status();
}

// Scan over two inputs of different lengths is refused.
TEST(ControlFlow, ScanRefusesInputsOfDifferentLengths) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  AddInput(g, "a", kFloat, {3, 2});
  AddInput(g, "b", kFloat, {4, 2});
  auto* node = AddNode(g, "Scan", {"a", "b"}, {"y"});
  auto* n = node->add_attribute();
  n->set_name("num_scan_inputs");
  n->set_type(onnx::AttributeProto::INT);
  n->set_i(2);
  auto* body = GraphAttr(node, "body")->mutable_g();
  AddInput(body, "ai", kFloat, {2});
  AddInput(body, "bi", kFloat, {2});
  AddNode(body, "Add", {"ai", "bi"}, {"o"});
  AddOutput(body, "o");
  AddOutput(g, "y");
  auto imported = onnx_io::ImportModel(m);
  ASSERT_TRUE(imported.ok()) << imported.status();
  auto out = ref::Run(**imported, {{"a", Tensor(DType::kFloat32, {3, 2})},
                                   {"b", Tensor(DType::kFloat32, {4, 2})}});
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << out.status();
}

}  // namespace
}  // namespace kiln

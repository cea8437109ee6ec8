// Hostile and broken models, built in code, fed through import -> shape inference -> the
// reference interpreter. Each must end in a clean non-OK status: never a crash, a hang or a
// huge allocation (DESIGN.md: "A crash on any input is a bug").
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

#include "compiler/onnx/importer.h"
#include "compiler/shape/infer.h"
#include "ir/verifier.h"
#include "ops/interpreter.h"
#include "tests/robustness/bad_model_util.h"

namespace kiln {
namespace {

using namespace bad_models;  // NOLINT: the helpers shared with the other half

namespace fs = std::filesystem;
using onnx::TensorProto;

// ---- sanity: the baseline is fine -----------------------------------------------------

TEST(BadModels, BaselineRuns) {
  absl::Status st = Pipeline(ReluModel());
  if (absl::IsUnimplemented(st)) GTEST_SKIP() << st;  // kernels still being written
  EXPECT_TRUE(st.ok()) << st;
}

// ---- bytes -------------------------------------------------------------------------------

TEST(BadModels, EveryTruncationIsHandled) {
  const std::string bytes = ReluModel().SerializeAsString();
  int rejected = 0;
  for (size_t len = 0; len < bytes.size(); ++len) {
    absl::Status st = Pipeline(bytes.substr(0, len));
    rejected += !st.ok();
  }
  // A prefix that ends between top-level fields is a valid (smaller) message; most are not.
  EXPECT_GT(rejected, static_cast<int>(bytes.size()) * 3 / 4);
}

TEST(BadModels, GarbageBytesAreRejected) {
  std::mt19937 rng(1234);
  for (int i = 0; i < 300; ++i) {
    std::string bytes(rng() % 512, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    EXPECT_FALSE(Pipeline(bytes).ok());
  }
}

TEST(BadModels, BitFlipsOfAValidModelNeverCrash) {
  const std::string bytes = ReluModel().SerializeAsString();
  std::mt19937 rng(99);
  for (int i = 0; i < 500; ++i) {
    std::string mutated = bytes;
    mutated[rng() % mutated.size()] ^= static_cast<char>(1u << (rng() % 8));
    (void)Pipeline(mutated);  // any status is fine; finishing is the test
  }
}

TEST(BadModels, NoGraph) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  EXPECT_CODE(Pipeline(m), kInvalidArgument);
}

TEST(BadModels, EmptyGraph) { EXPECT_CODE(Pipeline(BaseModel()), kInvalidArgument); }

// ---- structure ---------------------------------------------------------------------------

TEST(BadModels, Cycle) {
  onnx::ModelProto m = BaseModel();
  AddInput(m, "x");
  AddNode(m, "Add", {"x", "b"}, {"a"});
  AddNode(m, "Relu", {"a"}, {"b"});
  AddOutput(m, "b");
  EXPECT_CODE(Pipeline(m), kInvalidArgument);
}

TEST(BadModels, SelfLoop) {
  onnx::ModelProto m = BaseModel();
  AddInput(m, "x");
  AddNode(m, "Add", {"x", "y"}, {"y"});
  AddOutput(m, "y");
  EXPECT_CODE(Pipeline(m), kInvalidArgument);
}

TEST(BadModels, DanglingInputName) {
  onnx::ModelProto m = ReluModel();
  m.mutable_graph()->mutable_node(0)->set_input(0, "nowhere");
  EXPECT_CODE(Pipeline(m), kInvalidArgument);
}

TEST(BadModels, DanglingGraphOutput) {
  onnx::ModelProto m = ReluModel();
  AddOutput(m, "nowhere");
  EXPECT_CODE(Pipeline(m), kInvalidArgument);
}

TEST(BadModels, DuplicateNodeOutputs) {
  onnx::ModelProto m = ReluModel();
  AddNode(m, "Neg", {"x"}, {"y"});
  EXPECT_CODE(Pipeline(m), kInvalidArgument);
}

TEST(BadModels, NodeOverwritesGraphInput) {
  onnx::ModelProto m = ReluModel();
  AddNode(m, "Neg", {"y"}, {"x"});
  EXPECT_CODE(Pipeline(m), kInvalidArgument);
}

TEST(BadModels, DuplicateGraphOutputs) {
  onnx::ModelProto m = ReluModel();
  AddOutput(m, "y");
  EXPECT_CODE(Pipeline(m), kInvalidArgument);
}

TEST(BadModels, DuplicateGraphInputsAndInitializers) {
  onnx::ModelProto m = ReluModel();
  AddInput(m, "x");
  EXPECT_CODE(Pipeline(m), kInvalidArgument);
  onnx::ModelProto m2 = ReluModel();
  AddInitializer(m2, "w", {1})->add_float_data(1);
  AddInitializer(m2, "w", {1})->add_float_data(2);
  EXPECT_CODE(Pipeline(m2), kInvalidArgument);
  onnx::ModelProto m3 = ReluModel();
  AddInitializer(m3, "", {1})->add_float_data(1);
  EXPECT_CODE(Pipeline(m3), kInvalidArgument);
}

TEST(BadModels, MissingAndInvalidElemType) {
  onnx::ModelProto m = ReluModel();
  m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->clear_elem_type();
  EXPECT_CODE(Pipeline(m), kInvalidArgument);
  m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->set_elem_type(9999);
  EXPECT_CODE(Pipeline(m), kInvalidArgument);
  m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->set_elem_type(-3);
  EXPECT_CODE(Pipeline(m), kInvalidArgument);
  m.mutable_graph()->mutable_input(0)->clear_type();
  EXPECT_CODE(Pipeline(m), kInvalidArgument);
}

TEST(BadModels, NonTensorGraphInput) {
  onnx::ModelProto m = ReluModel();
  auto* type = m.mutable_graph()->mutable_input(0)->mutable_type();
  type->mutable_sequence_type()->mutable_elem_type()->mutable_tensor_type()->set_elem_type(1);
  EXPECT_CODE(Pipeline(m), kUnimplemented);
}

TEST(BadModels, NegativeDeclaredDim) {
  onnx::ModelProto m = ReluModel();
  auto* shape =
      m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape();
  shape->mutable_dim(0)->set_dim_value(-5);
  EXPECT_CODE(Pipeline(m), kInvalidArgument);
}

TEST(BadModels, MissingOnnxOpsetImport) {
  onnx::ModelProto m = ReluModel();
  m.mutable_opset_import(0)->set_domain("com.example");
  EXPECT_CODE(Pipeline(m), kInvalidArgument);
  onnx::ModelProto m2 = ReluModel();
  m2.mutable_opset_import(0)->set_version(-4);
  EXPECT_CODE(Pipeline(m2), kInvalidArgument);
}

TEST(BadModels, UnknownOperatorIsUnimplemented) {
  onnx::ModelProto m = ReluModel();
  m.mutable_graph()->mutable_node(0)->set_op_type("NoSuchOp");
  EXPECT_CODE(Pipeline(m), kUnimplemented);
  m.mutable_graph()->mutable_node(0)->set_op_type("");
  EXPECT_FALSE(Pipeline(m).ok());
}

// ---- attributes and Constant nodes ---------------------------------------------------

// cond -> If(then: Relu(x), else: Relu(x)) -> y, the bodies reading x from the outer graph.
onnx::ModelProto IfModel() {
  onnx::ModelProto m = BaseModel();
  AddInput(m, "x");
  AddInput(m, "cond", {}, TensorProto::BOOL);
  onnx::NodeProto* n = AddNode(m, "If", {"cond"}, {"y"});
  for (const char* branch : {"then_branch", "else_branch"}) {
    onnx::ModelProto body = BaseModel();
    AddNode(body, "Relu", {"x"}, {std::string(branch) + "_y"});
    AddOutput(body, std::string(branch) + "_y");
    auto* a = n->add_attribute();
    a->set_name(branch);
    a->set_type(onnx::AttributeProto::GRAPH);
    *a->mutable_g() = body.graph();
  }
  AddOutput(m, "y");
  return m;
}

// Graph attributes are imported as bodies and checked like a main graph: an unknown
// operator or a value that exists nowhere inside one is refused, never run.
TEST(BadModels, GraphAttributeBodiesAreChecked) {
  ASSERT_TRUE(Pipeline(IfModel()).ok()) << Pipeline(IfModel());
  onnx::ModelProto unknown = IfModel();
  unknown.mutable_graph()->mutable_node(0)->mutable_attribute(0)->mutable_g()->mutable_node(0)
      ->set_op_type("NoSuchOp");
  EXPECT_CODE(Pipeline(unknown), kUnimplemented);
  onnx::ModelProto dangling = IfModel();
  dangling.mutable_graph()->mutable_node(0)->mutable_attribute(1)->mutable_g()->mutable_node(0)
      ->set_input(0, "nowhere");
  EXPECT_FALSE(Pipeline(dangling).ok());
}

TEST(BadModels, AttributeReferenceAndSparseTensorAttribute) {
  onnx::ModelProto m = ReluModel();
  auto* a = m.mutable_graph()->mutable_node(0)->add_attribute();
  a->set_name("alpha");
  a->set_ref_attr_name("outer_alpha");
  EXPECT_CODE(Pipeline(m), kUnimplemented);
  onnx::ModelProto m2 = ReluModel();
  auto* s = m2.mutable_graph()->mutable_node(0)->add_attribute();
  s->set_name("sparse");
  s->set_type(onnx::AttributeProto::SPARSE_TENSOR);
  EXPECT_CODE(Pipeline(m2), kUnimplemented);
}

TEST(BadModels, BadConstantNodes) {
  onnx::ModelProto none = ReluModel();
  AddNode(none, "Constant", {}, {"c"});
  EXPECT_CODE(Pipeline(none), kInvalidArgument);

  onnx::ModelProto wrong_type = ReluModel();
  auto* a = AddNode(wrong_type, "Constant", {}, {"c"})->add_attribute();
  a->set_name("value");
  a->set_type(onnx::AttributeProto::INTS);  // says value, holds no tensor
  a->add_ints(1);
  EXPECT_FALSE(Pipeline(wrong_type).ok());

  onnx::ModelProto no_output = ReluModel();
  auto* b = AddNode(no_output, "Constant", {}, {})->add_attribute();
  b->set_name("value_float");
  b->set_type(onnx::AttributeProto::FLOAT);
  EXPECT_CODE(Pipeline(no_output), kInvalidArgument);

  onnx::ModelProto sparse = ReluModel();
  auto* c = AddNode(sparse, "Constant", {}, {"c"})->add_attribute();
  c->set_name("sparse_value");
  c->set_type(onnx::AttributeProto::SPARSE_TENSOR);
  EXPECT_CODE(Pipeline(sparse), kUnimplemented);
}

TEST(BadModels, UnconvertibleOldOpsets) {
  onnx::ModelProto m = BaseModel(1);
  AddInput(m, "x", {2, 3});
  AddInput(m, "t", {}, TensorProto::INT64);
  AddInput(m, "a", {}, TensorProto::INT64);
  AddNode(m, "Tile", {"x", "t", "a"}, {"y"});  // Tile-1 with run-time tiles/axis
  AddOutput(m, "y");
  EXPECT_CODE(Pipeline(m), kUnimplemented);

  onnx::ModelProto u = BaseModel(11);
  AddInput(u, "x");
  AddNode(u, "Unsqueeze", {"x"}, {"y"});  // Unsqueeze-11 without axes
  AddOutput(u, "y");
  EXPECT_CODE(Pipeline(u), kInvalidArgument);
}

}  // namespace
}  // namespace kiln

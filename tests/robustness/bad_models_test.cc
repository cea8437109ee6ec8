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

namespace kiln {
namespace {

namespace fs = std::filesystem;
using onnx::TensorProto;

// ---- model construction -----------------------------------------------------------------

onnx::ModelProto BaseModel(int64_t opset = 17) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(opset);
  m.mutable_graph()->set_name("bad");
  return m;
}

void AddValueInfo(onnx::ValueInfoProto* v, const std::string& name, int elem_type,
                  const std::vector<int64_t>& dims) {
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem_type);
  auto* shape = tt->mutable_shape();
  for (int64_t d : dims) shape->add_dim()->set_dim_value(d);
}

void AddInput(onnx::ModelProto& m, const std::string& name, std::vector<int64_t> dims = {2},
              int elem_type = TensorProto::FLOAT) {
  AddValueInfo(m.mutable_graph()->add_input(), name, elem_type, dims);
}

void AddOutput(onnx::ModelProto& m, const std::string& name) {
  auto* out = m.mutable_graph()->add_output();
  out->set_name(name);
  out->mutable_type()->mutable_tensor_type()->set_elem_type(TensorProto::FLOAT);
}

onnx::NodeProto* AddNode(onnx::ModelProto& m, const std::string& op,
                         const std::vector<std::string>& ins,
                         const std::vector<std::string>& outs) {
  auto* n = m.mutable_graph()->add_node();
  n->set_op_type(op);
  n->set_name(op + "_" + std::to_string(m.graph().node_size()));
  for (const auto& i : ins) n->add_input(i);
  for (const auto& o : outs) n->add_output(o);
  return n;
}

TensorProto* AddInitializer(onnx::ModelProto& m, const std::string& name,
                            const std::vector<int64_t>& dims, int type = TensorProto::FLOAT) {
  auto* t = m.mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(type);
  for (int64_t d : dims) t->add_dims(d);
  return t;
}

void AddIntsAttr(onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

// x -> Relu -> y: the valid starting point most cases break one thing of.
onnx::ModelProto ReluModel() {
  onnx::ModelProto m = BaseModel();
  AddInput(m, "x");
  AddNode(m, "Relu", {"x"}, {"y"});
  AddOutput(m, "y");
  return m;
}

// ---- the pipeline ------------------------------------------------------------------------

// Zero feeds for every graph input (symbolic dims bound to 1).
absl::StatusOr<ref::TensorMap> ZeroFeeds(const Graph& g) {
  ref::TensorMap feeds;
  for (const Value* in : g.inputs) {
    if (!in->shape || !IsSupportedDType(in->dtype)) {
      return absl::InvalidArgumentError("input '" + in->name + "' cannot be fed");
    }
    std::vector<int64_t> dims;
    for (const Dim& d : *in->shape) dims.push_back(d.known() ? d.value : 1);
    if (NumElements(dims) > (1 << 20)) return absl::ResourceExhaustedError("feed too big");
    feeds[in->name] = Tensor(in->dtype, dims);
  }
  return feeds;
}

absl::Status RunGraph(std::unique_ptr<Graph> g) {
  RETURN_IF_ERROR(VerifyGraph(*g));  // an imported graph always verifies, or import failed
  RETURN_IF_ERROR(shape::InferShapes(*g));
  ASSIGN_OR_RETURN(ref::TensorMap feeds, ZeroFeeds(*g));
  return ref::Run(*g, feeds).status();
}

absl::Status Pipeline(const std::string& bytes) {
  ASSIGN_OR_RETURN(std::unique_ptr<Graph> g, onnx_io::ImportModelBytes(bytes));
  return RunGraph(std::move(g));
}

absl::Status Pipeline(const onnx::ModelProto& m) {
  std::string bytes;
  EXPECT_TRUE(m.SerializeToString(&bytes));
  return Pipeline(bytes);
}

// Writes the model into a fresh folder and imports it by path (external data resolves
// relative to that folder).
class ModelDir {
 public:
  ModelDir() {
    static int counter = 0;
    root_ = fs::temp_directory_path() /
            ("kiln_bad_models_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(root_ / "model");
  }
  ~ModelDir() {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  fs::path model_dir() const { return root_ / "model"; }
  fs::path root() const { return root_; }
  void WriteFile(const fs::path& path, const std::string& bytes) const {
    std::ofstream(path, std::ios::binary) << bytes;
  }
  absl::Status Run(const onnx::ModelProto& m) const {
    const fs::path path = model_dir() / "model.onnx";
    WriteFile(path, m.SerializeAsString());
    ASSIGN_OR_RETURN(std::unique_ptr<Graph> g, onnx_io::ImportModelFile(path.string()));
    return RunGraph(std::move(g));
  }

 private:
  fs::path root_;
};

#define EXPECT_CODE(status, want)                         \
  do {                                                    \
    const absl::Status st_ = (status);                    \
    EXPECT_EQ(st_.code(), absl::StatusCode::want) << st_; \
  } while (0)

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

// ---- initializers ------------------------------------------------------------------------

// x + w, where w is the initializer under test.
onnx::ModelProto AddWithInitializer() {
  onnx::ModelProto m = BaseModel();
  AddInput(m, "x");
  AddNode(m, "Add", {"x", "w"}, {"y"});
  AddOutput(m, "y");
  return m;
}

TEST(BadModels, NegativeInitializerDim) {
  onnx::ModelProto m = AddWithInitializer();
  AddInitializer(m, "w", {-2})->add_float_data(1);
  EXPECT_CODE(Pipeline(m), kInvalidArgument);
}

TEST(BadModels, HugeInitializerDims) {
  onnx::ModelProto m = AddWithInitializer();
  AddInitializer(m, "w", {int64_t{1} << 40, int64_t{1} << 40, 0, int64_t{1} << 40});
  EXPECT_CODE(Pipeline(m), kResourceExhausted);
  onnx::ModelProto overflow = AddWithInitializer();
  const int64_t big = std::numeric_limits<int64_t>::max();
  AddInitializer(overflow, "w", {big, big, big});
  EXPECT_CODE(Pipeline(overflow), kResourceExhausted);
}

TEST(BadModels, PromisedGigabytesWithoutDataAllocateNothing) {
  // 8 GiB promised, nothing held: rejected before any allocation (the test would otherwise
  // take seconds and gigabytes).
  onnx::ModelProto m = AddWithInitializer();
  AddInitializer(m, "w", {int64_t{1} << 30, 2})->set_raw_data("abcd");
  EXPECT_CODE(Pipeline(m), kInvalidArgument);
  onnx::ModelProto typed = AddWithInitializer();
  AddInitializer(typed, "w", {int64_t{1} << 30, 2})->add_float_data(1);
  EXPECT_CODE(Pipeline(typed), kInvalidArgument);
}

TEST(BadModels, RawDataSizeMismatch) {
  onnx::ModelProto m = AddWithInitializer();
  AddInitializer(m, "w", {2})->set_raw_data(std::string(7, '\1'));
  EXPECT_CODE(Pipeline(m), kInvalidArgument);
}

TEST(BadModels, TypedDataCountMismatch) {
  onnx::ModelProto m = AddWithInitializer();
  TensorProto* t = AddInitializer(m, "w", {3});
  t->add_float_data(1);
  EXPECT_CODE(Pipeline(m), kInvalidArgument);
}

TEST(BadModels, InitializerTypes) {
  onnx::ModelProto none = AddWithInitializer();
  AddInitializer(none, "w", {1}, 0)->add_float_data(1);
  EXPECT_FALSE(Pipeline(none).ok());
  onnx::ModelProto str = AddWithInitializer();
  AddInitializer(str, "w", {1}, TensorProto::STRING)->add_string_data("s");
  EXPECT_CODE(Pipeline(str), kUnimplemented);
  onnx::ModelProto future = AddWithInitializer();
  AddInitializer(future, "w", {1}, 99)->set_raw_data("x");  // a type newer than Kiln knows
  EXPECT_CODE(Pipeline(future), kUnimplemented);
  onnx::ModelProto sparse = AddWithInitializer();
  sparse.mutable_graph()->add_sparse_initializer();
  EXPECT_CODE(Pipeline(sparse), kUnimplemented);
}

TEST(BadModels, WrongInitializerTypeForOperator) {
  onnx::ModelProto m = AddWithInitializer();
  AddInitializer(m, "w", {2}, TensorProto::INT64)->add_int64_data(1);
  m.mutable_graph()->mutable_initializer(0)->add_int64_data(2);
  EXPECT_FALSE(Pipeline(m).ok());  // float + int64: shape inference refuses
}

// ---- external data -----------------------------------------------------------------------

void SetExternal(TensorProto* t, const std::string& location, const std::string& offset = "",
                 const std::string& length = "") {
  t->set_data_location(TensorProto::EXTERNAL);
  auto* kv = t->add_external_data();
  kv->set_key("location");
  kv->set_value(location);
  if (!offset.empty()) {
    kv = t->add_external_data();
    kv->set_key("offset");
    kv->set_value(offset);
  }
  if (!length.empty()) {
    kv = t->add_external_data();
    kv->set_key("length");
    kv->set_value(length);
  }
}

onnx::ModelProto ExternalModel(const std::string& location, const std::string& offset = "",
                               const std::string& length = "") {
  onnx::ModelProto m = AddWithInitializer();
  SetExternal(AddInitializer(m, "w", {2}), location, offset, length);
  return m;
}

TEST(BadModels, ExternalDataThatWorks) {
  ModelDir dir;
  dir.WriteFile(dir.model_dir() / "w.bin", std::string(8, '\0'));
  absl::Status st = dir.Run(ExternalModel("w.bin"));
  if (absl::IsUnimplemented(st)) GTEST_SKIP() << st;
  EXPECT_TRUE(st.ok()) << st;
}

TEST(BadModels, ExternalDataEscapingTheFolder) {
  ModelDir dir;
  dir.WriteFile(dir.root() / "secret.bin", std::string(8, '\0'));
  EXPECT_CODE(dir.Run(ExternalModel("../secret.bin")), kInvalidArgument);
  EXPECT_CODE(dir.Run(ExternalModel("sub/../../secret.bin")), kInvalidArgument);
  EXPECT_CODE(dir.Run(ExternalModel((dir.root() / "secret.bin").string())), kInvalidArgument);
  EXPECT_CODE(dir.Run(ExternalModel("/etc/passwd")), kInvalidArgument);
  EXPECT_CODE(dir.Run(ExternalModel("")), kInvalidArgument);
  // A symlink inside the folder that points outside it is an escape too.
  fs::create_symlink(dir.root() / "secret.bin", dir.model_dir() / "link.bin");
  EXPECT_CODE(dir.Run(ExternalModel("link.bin")), kInvalidArgument);
}

TEST(BadModels, ExternalDataBadOffsetsAndFiles) {
  ModelDir dir;
  dir.WriteFile(dir.model_dir() / "w.bin", std::string(8, '\0'));
  EXPECT_CODE(dir.Run(ExternalModel("missing.bin")), kNotFound);
  EXPECT_CODE(dir.Run(ExternalModel("w.bin", "4")), kInvalidArgument);  // too short from 4
  EXPECT_CODE(dir.Run(ExternalModel("w.bin", "-1")), kInvalidArgument);
  EXPECT_CODE(dir.Run(ExternalModel("w.bin", "9223372036854775807")), kInvalidArgument);
  EXPECT_CODE(dir.Run(ExternalModel("w.bin", "99999999999999999999")), kInvalidArgument);
  EXPECT_CODE(dir.Run(ExternalModel("w.bin", "zero")), kInvalidArgument);
  EXPECT_CODE(dir.Run(ExternalModel("w.bin", "0", "4")), kInvalidArgument);  // wrong length
  EXPECT_FALSE(dir.Run(ExternalModel(".")).ok());                            // the folder itself
}

TEST(BadModels, ExternalDataFromBytesHasNoFolder) {
  // Bytes (an upload) have no folder, so external data is refused outright.
  EXPECT_CODE(Pipeline(ExternalModel("w.bin")), kInvalidArgument);
}

// ---- computations that must fail cleanly ------------------------------------------------

TEST(BadModels, ReshapeToAbsurdShape) {
  onnx::ModelProto m = BaseModel();
  AddInput(m, "x");
  TensorProto* s = AddInitializer(m, "s", {3}, TensorProto::INT64);
  for (int64_t v : {int64_t{1} << 40, int64_t{1} << 40, int64_t{-1}}) s->add_int64_data(v);
  AddNode(m, "Reshape", {"x", "s"}, {"y"});
  AddOutput(m, "y");
  EXPECT_FALSE(Pipeline(m).ok());
}

TEST(BadModels, ExpandAndConstantOfShapeToAbsurdShapes) {
  onnx::ModelProto m = BaseModel();
  AddInput(m, "x", {1});
  TensorProto* s = AddInitializer(m, "s", {2}, TensorProto::INT64);
  s->add_int64_data(int64_t{1} << 40);
  s->add_int64_data(int64_t{1} << 40);
  AddNode(m, "Expand", {"x", "s"}, {"y"});
  AddOutput(m, "y");
  EXPECT_FALSE(Pipeline(m).ok());

  onnx::ModelProto c = BaseModel();
  AddInput(c, "x", {1});
  TensorProto* cs = AddInitializer(c, "s", {2}, TensorProto::INT64);
  cs->add_int64_data(int64_t{1} << 40);
  cs->add_int64_data(-3);
  AddNode(c, "ConstantOfShape", {"s"}, {"z"});
  AddNode(c, "Add", {"x", "z"}, {"y"});
  AddOutput(c, "y");
  EXPECT_FALSE(Pipeline(c).ok());
}

TEST(BadModels, OutOfRangeGatherAndAxes) {
  onnx::ModelProto m = BaseModel();
  AddInput(m, "x", {3});
  AddInitializer(m, "i", {1}, TensorProto::INT64)->add_int64_data(7);
  AddNode(m, "Gather", {"x", "i"}, {"y"});
  AddOutput(m, "y");
  EXPECT_FALSE(Pipeline(m).ok());

  onnx::ModelProto t = BaseModel();
  AddInput(t, "x", {2, 3});
  AddIntsAttr(AddNode(t, "Transpose", {"x"}, {"y"}), "perm", {5, 0});
  AddOutput(t, "y");
  EXPECT_FALSE(Pipeline(t).ok());
}

TEST(BadModels, MismatchedOperands) {
  onnx::ModelProto m = BaseModel();
  AddInput(m, "a", {2, 3});
  AddInput(m, "b", {4, 5});
  AddNode(m, "MatMul", {"a", "b"}, {"y"});
  AddOutput(m, "y");
  EXPECT_FALSE(Pipeline(m).ok());

  onnx::ModelProto c = BaseModel();
  AddInput(c, "x", {1, 3, 4, 4});
  AddInitializer(c, "w", {2, 5, 1, 1})->set_raw_data(std::string(40, '\0'));
  AddNode(c, "Conv", {"x", "w"}, {"y"});
  AddOutput(c, "y");
  EXPECT_FALSE(Pipeline(c).ok());
}

TEST(BadModels, WrongInputCounts) {
  onnx::ModelProto m = BaseModel();
  AddInput(m, "x");
  AddNode(m, "Add", {"x"}, {"y"});
  AddOutput(m, "y");
  EXPECT_FALSE(Pipeline(m).ok());

  onnx::ModelProto r = BaseModel();
  AddInput(r, "x");
  AddNode(r, "Relu", {}, {"y"});
  AddOutput(r, "y");
  EXPECT_FALSE(Pipeline(r).ok());

  onnx::ModelProto o = BaseModel();
  AddInput(o, "x");
  AddNode(o, "Relu", {"x"}, {});
  AddOutput(o, "x");
  (void)Pipeline(o);  // a node with no outputs: any clean status
}

}  // namespace
}  // namespace kiln

// Exporter round trip: import -> export -> import must give the same graph (nodes, attributes,
// constants byte for byte, declared types), for real conformance models and built graphs.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include "compiler/onnx/exporter.h"
#include "compiler/onnx/importer.h"
#include "ir/builder.h"
#include "ir/verifier.h"

namespace kiln::onnx_io {
namespace {

namespace fs = std::filesystem;

// The conformance data: $KILN_ONNX_TESTS, else ../shared/onnx-tests beside the source tree.
fs::path OnnxTestsDir() {
  if (const char* env = std::getenv("KILN_ONNX_TESTS")) return env;
  fs::path src = std::getenv("KILN_SOURCE_DIR") ? fs::path(std::getenv("KILN_SOURCE_DIR"))
                                                : fs::path(__FILE__).parent_path() / "../..";
  return src / "../shared/onnx-tests";
}

std::string Name(const Value* v) { return v ? v->name : "<omitted>"; }

void ExpectSameValueInfo(const Value* a, const Value* b) {
  EXPECT_EQ(a->name, b->name);
  EXPECT_EQ(a->dtype, b->dtype) << a->name;
  ASSERT_EQ(a->shape.has_value(), b->shape.has_value()) << a->name;
  if (a->shape) {
    EXPECT_EQ(ShapeToString(*a->shape), ShapeToString(*b->shape)) << a->name;
  }
}

void ExpectSameConstant(const Value* a, const Value* b) {
  ASSERT_EQ(a->is_constant(), b->is_constant()) << a->name;
  if (!a->is_constant()) return;
  const Tensor& x = *a->constant;
  const Tensor& y = *b->constant;
  ASSERT_EQ(x.dtype(), y.dtype()) << a->name;
  ASSERT_EQ(x.shape(), y.shape()) << a->name;
  EXPECT_EQ(std::memcmp(x.raw(), y.raw(), x.nbytes()), 0) << a->name << ": bytes differ";
}

void ExpectSameGraph(const Graph& a, const Graph& b, bool compare_opset);

void ExpectSameNode(const Node& a, const Node& b, bool compare_opset) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.op_type, b.op_type) << a.name;
  EXPECT_EQ(a.domain, b.domain) << a.name;
  if (compare_opset) {
    EXPECT_EQ(a.opset, b.opset) << a.name;
  }
  ASSERT_EQ(a.inputs.size(), b.inputs.size()) << a.name;
  for (size_t i = 0; i < a.inputs.size(); ++i) {
    EXPECT_EQ(Name(a.inputs[i]), Name(b.inputs[i])) << a.name;
    if (a.inputs[i] && b.inputs[i]) ExpectSameConstant(a.inputs[i], b.inputs[i]);
  }
  ASSERT_EQ(a.outputs.size(), b.outputs.size()) << a.name;
  for (size_t i = 0; i < a.outputs.size(); ++i) {
    EXPECT_EQ(Name(a.outputs[i]), Name(b.outputs[i])) << a.name;
    if (a.outputs[i] && b.outputs[i]) ExpectSameValueInfo(a.outputs[i], b.outputs[i]);
  }
  EXPECT_EQ(a.captures, b.captures) << a.name;
  ASSERT_EQ(a.attrs.size(), b.attrs.size()) << a.name;
  for (const auto& [key, attr] : a.attrs) {
    const Attribute* other = b.FindAttr(key);
    ASSERT_NE(other, nullptr) << a.name << "." << key;
    if (attr.kind == Attribute::Kind::kGraph && other->kind == Attribute::Kind::kGraph) {
      SCOPED_TRACE(a.name + "." + key);
      ExpectSameGraph(*attr.g, *other->g, compare_opset);  // bodies compare by structure
      continue;
    }
    EXPECT_TRUE(attr == *other) << a.name << "." << key;
  }
}

void ExpectSameGraph(const Graph& a, const Graph& b, bool compare_opset) {
  if (compare_opset) {
    EXPECT_EQ(a.opsets, b.opsets);
  }
  ASSERT_EQ(a.inputs.size(), b.inputs.size());
  for (size_t i = 0; i < a.inputs.size(); ++i) ExpectSameValueInfo(a.inputs[i], b.inputs[i]);
  ASSERT_EQ(a.outputs.size(), b.outputs.size());
  for (size_t i = 0; i < a.outputs.size(); ++i) {
    ExpectSameValueInfo(a.outputs[i], b.outputs[i]);
    ExpectSameConstant(a.outputs[i], b.outputs[i]);
  }
  ASSERT_EQ(a.nodes().size(), b.nodes().size());
  for (size_t i = 0; i < a.nodes().size(); ++i) {
    ExpectSameNode(*a.nodes()[i], *b.nodes()[i], compare_opset);
  }
}

// Exports `g`, re-imports it with `options` and compares.
void ExpectRoundTrip(const Graph& g, const ImportOptions& options, bool compare_opset) {
  absl::StatusOr<onnx::ModelProto> model = ExportModel(g);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->ir_version(), 8);
  std::string bytes;
  ASSERT_TRUE(model->SerializeToString(&bytes));
  absl::StatusOr<std::unique_ptr<Graph>> back = ImportModelBytes(bytes, options);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_TRUE(VerifyGraph(**back).ok());
  ExpectSameGraph(g, **back, compare_opset);
}

class ConformanceRoundTrip : public ::testing::TestWithParam<const char*> {};

TEST_P(ConformanceRoundTrip, LosslessWithoutNormalization) {
  const fs::path model = OnnxTestsDir() / "node" / GetParam() / "model.onnx";
  if (!fs::exists(model)) GTEST_SKIP() << model << " not found (no shared/onnx-tests here)";
  ImportOptions raw;
  raw.normalize = false;
  raw.model_dir = model.parent_path();
  std::ifstream f(model, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  absl::StatusOr<std::unique_ptr<Graph>> g = ImportModelBytes(bytes, raw);
  ASSERT_TRUE(g.ok()) << g.status();
  ExpectRoundTrip(**g, raw, /*compare_opset=*/true);
}

TEST_P(ConformanceRoundTrip, LosslessAfterNormalization) {
  const fs::path model = OnnxTestsDir() / "node" / GetParam() / "model.onnx";
  if (!fs::exists(model)) GTEST_SKIP() << model << " not found (no shared/onnx-tests here)";
  absl::StatusOr<std::unique_ptr<Graph>> g = ImportModelFile(model.string());
  ASSERT_TRUE(g.ok()) << g.status();
  // A normalized graph is exported at the internal opset, so node versions are not compared.
  ExpectRoundTrip(**g, ImportOptions{}, /*compare_opset=*/false);
}

INSTANTIATE_TEST_SUITE_P(
    Node, ConformanceRoundTrip,
    ::testing::Values("test_conv_with_strides_padding", "test_resize_upsample_scales_linear",
                      "test_split_variable_parts_1d_opset18", "test_layer_normalization_4d_axis0",
                      "test_upsample_nearest", "test_clip_default_inbounds",
                      "test_resize_downsample_sizes_nearest", "test_constantofshape_int_zeros",
                      "test_einsum_batch_diagonal", "test_maxpool_with_argmax_2d_precomputed_pads",
                      "test_batchnorm_epsilon", "test_dropout_default_mask", "test_softmax_axis_0",
                      "test_gather_0"));

// Every conformance model that imports must round-trip: a cheap sweep over ~1800 models that
// catches any attribute kind, dtype or optional-input layout the picks above miss.
TEST(RoundTrip, EveryImportableConformanceModel) {
  const fs::path dir = OnnxTestsDir() / "node";
  if (!fs::exists(dir)) GTEST_SKIP() << dir << " not found (no shared/onnx-tests here)";
  int compared = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const fs::path model = entry.path() / "model.onnx";
    std::ifstream f(model, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    ImportOptions raw;
    raw.normalize = false;
    raw.model_dir = entry.path();
    absl::StatusOr<std::unique_ptr<Graph>> g = ImportModelBytes(bytes, raw);
    if (!g.ok()) continue;  // unsupported features are the importer tests' business
    SCOPED_TRACE(entry.path().filename().string());
    ExpectRoundTrip(**g, raw, /*compare_opset=*/true);
    ++compared;
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(compared, 1000);
}

// A built graph with every attribute kind, a Kiln operator, symbolic dims, an omitted
// optional input and an unused optional output.
std::unique_ptr<Graph> BuiltGraph() {
  GraphBuilder b(17);
  Value* x = b.Input("x", DType::kFloat32, {Dim::Symbol("batch"), 3, Dim()});
  Value* w = b.Constant("w", Tensor::FromFloat({0.5f, -1.0f, 2.0f}, {3}));
  Value* h = b.Constant("h", Tensor::Scalar(DType::kFloat16, 1.5));
  Tensor table(DType::kInt8, {2, 2});
  for (int i = 0; i < 4; ++i) table.SetInt(i, i - 2);
  Value* fused = b.Op("FusedMulAddAct", {x, w, nullptr},
                      {{"alpha", Attribute::Float(0.25f)},
                       {"activation", Attribute::String("relu")},
                       {"axes", Attribute::Ints({-1, 1})},
                       {"coeffs", Attribute::Floats({1.0f, -2.5f})},
                       {"names", Attribute::Strings({"a", "", "c"})},
                       {"count", Attribute::Int(-7)},
                       {"table", Attribute::TensorValue(table)}},
                      kKilnDomain);
  std::vector<Value*> parts = b.OpN("Split", {fused}, 2, {{"axis", Attribute::Int(1)}});
  Value* casted = b.Op("Cast", {h}, {{"to", Attribute::Int(1)}});
  b.Output(b.Op("Add", {parts[0], casted}));
  b.Output(w);  // a constant as a graph output
  return b.Build();
}

TEST(RoundTrip, BuiltGraphWithKilnOperatorIsLossless) {
  std::unique_ptr<Graph> g = BuiltGraph();
  g->nodes()[0]->outputs.push_back(nullptr);  // an omitted trailing optional output
  ImportOptions raw;
  raw.normalize = false;
  ExpectRoundTrip(*g, raw, /*compare_opset=*/true);
}

TEST(RoundTrip, OpsetImportNamesEveryDomain) {
  std::unique_ptr<Graph> g = BuiltGraph();
  g->opsets.erase(kKilnDomain);  // a pass added a Kiln node without declaring the domain
  absl::StatusOr<onnx::ModelProto> m = ExportModel(*g);
  ASSERT_TRUE(m.ok()) << m.status();
  std::map<std::string, int64_t> opsets;
  for (const auto& op : m->opset_import()) opsets[op.domain()] = op.version();
  EXPECT_EQ(opsets.at(""), 17);
  EXPECT_EQ(opsets.at("ai.kiln"), 1);
  // Constants are initializers with raw_data; symbolic dims are dim_param.
  ASSERT_EQ(m->graph().initializer_size(), 2);
  EXPECT_TRUE(m->graph().initializer(0).has_raw_data());
  EXPECT_EQ(m->graph().input(0).type().tensor_type().shape().dim(0).dim_param(), "batch");
  EXPECT_FALSE(m->graph().input(0).type().tensor_type().shape().dim(2).has_dim_value());
  EXPECT_EQ(m->graph().node(0).input(2), "");
}

TEST(RoundTrip, ExportFileAndReadBack) {
  std::unique_ptr<Graph> g = BuiltGraph();
  const fs::path path = fs::temp_directory_path() / "kiln_roundtrip_test.onnx";
  ASSERT_TRUE(ExportModelFile(*g, path.string()).ok());
  absl::StatusOr<std::unique_ptr<Graph>> back = ImportModelFile(path.string());
  fs::remove(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ((*back)->nodes().size(), g->nodes().size());
}

// The external data hooks: the exporter hands a constant's bytes to the caller instead of
// writing them, the importer asks the caller for them back; the graph is the same.
TEST(RoundTrip, ExternalHooksMoveConstantsOutAndBack) {
  std::unique_ptr<Graph> g = BuiltGraph();
  std::map<std::string, Tensor> store;
  ExportOptions out;
  out.external = [&](const Tensor& t) -> std::optional<std::string> {
    if (t.dtype() != DType::kFloat32) return std::nullopt;  // the float16 scalar stays inline
    const std::string location = "store:" + std::to_string(store.size());
    store[location] = t;
    return location;
  };
  absl::StatusOr<onnx::ModelProto> m = ExportModel(*g, out);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(store.size(), 1u);
  const onnx::TensorProto& w = m->graph().initializer(0);
  EXPECT_EQ(w.data_location(), onnx::TensorProto::EXTERNAL);
  EXPECT_FALSE(w.has_raw_data());
  EXPECT_TRUE(m->graph().initializer(1).has_raw_data());
  ImportOptions in;
  in.normalize = false;
  in.external_scheme = "store:";
  int asked = 0;
  in.external = [&](const std::string& location, DType dtype,
                    const std::vector<int64_t>& dims) -> absl::StatusOr<Tensor> {
    ++asked;
    EXPECT_EQ(dtype, DType::kFloat32);
    EXPECT_EQ(dims, std::vector<int64_t>{3});
    return store.at(location);
  };
  absl::StatusOr<std::unique_ptr<Graph>> back = ImportModel(*m, in);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(asked, 1);
  ExpectSameGraph(*g, **back, /*compare_opset=*/true);
  // An answer of another shape is refused, not imported.
  in.external = [](const std::string&, DType, const std::vector<int64_t>&) -> absl::StatusOr<Tensor> {
    return Tensor::FromFloat({1.0f, 2.0f}, {2});
  };
  EXPECT_FALSE(ImportModel(*m, in).ok());
}

TEST(RoundTrip, UndefinedInputIsRefused) {
  std::unique_ptr<Graph> g = BuiltGraph();
  Value* stray = g->AddValue("stray");
  g->mutable_nodes().back()->inputs[1] = stray;
  absl::StatusOr<onnx::ModelProto> m = ExportModel(*g);
  EXPECT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("stray"), std::string::npos) << m.status();
}

}  // namespace
}  // namespace kiln::onnx_io

// What the exporter writes must pass ONNX's own checker (onnx::checker::check_model with full
// shape inference off: ONNX 1.12 knows opsets up to 17 only, so models stay at or below 17).
#include <gtest/gtest.h>
#include <onnx/checker.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "compiler/onnx/exporter.h"
#include "compiler/onnx/importer.h"
#include "compiler/shape/infer.h"
#include "ir/builder.h"

namespace kiln::onnx_io {
namespace {

namespace fs = std::filesystem;

fs::path NodeTestsDir() {
  if (const char* env = std::getenv("KILN_ONNX_TESTS")) return fs::path(env) / "node";
  fs::path src = std::getenv("KILN_SOURCE_DIR") ? fs::path(std::getenv("KILN_SOURCE_DIR"))
                                                : fs::path(__FILE__).parent_path() / "../..";
  return src / "../shared/onnx-tests/node";
}

// The checker's verdict as a string ("" when it accepts).
std::string CheckerVerdict(const onnx::ModelProto& model) {
  try {
    onnx::checker::check_model(model);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(ExportChecker, BuiltGraph) {
  GraphBuilder b(17);
  Value* x = b.Input("x", DType::kFloat32, {Dim::Symbol("batch"), 4});
  Value* w = b.Constant("w", Tensor::FromFloat({1, 2, 3, 4, 5, 6, 7, 8}, {4, 2}));
  Value* y = b.Op("MatMul", {x, w});
  Value* axes = b.Constant("axes", Tensor::FromInt64({1}, {1}));
  Value* z = b.Op("ReduceSum", {y, axes}, {{"keepdims", Attribute::Int(0)}});
  Value* c = b.Op("Clip", {z, nullptr, b.Constant("hi", Tensor::Scalar(DType::kFloat32, 6))});
  b.Output(c);
  std::unique_ptr<Graph> g = b.Build();
  // ONNX requires typed graph outputs; the builder leaves typing to shape inference.
  ASSERT_TRUE(shape::InferShapes(*g).ok());
  absl::StatusOr<onnx::ModelProto> m = ExportModel(*g);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(CheckerVerdict(*m), "");
}

// Conformance models at opsets ONNX 1.12 knows, imported without normalization (which would
// lift them to opset 21) and exported again.
TEST(ExportChecker, ConformanceModels) {
  const fs::path dir = NodeTestsDir();
  if (!fs::exists(dir)) GTEST_SKIP() << dir << " not found";
  int checked = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    std::ifstream f(entry.path() / "model.onnx", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    onnx::ModelProto original;
    if (!original.ParseFromString(bytes) || !CheckerVerdict(original).empty()) continue;
    ImportOptions raw;
    raw.normalize = false;
    raw.model_dir = entry.path();
    absl::StatusOr<std::unique_ptr<Graph>> g = ImportModel(original, raw);
    if (!g.ok()) continue;
    absl::StatusOr<onnx::ModelProto> m = ExportModel(**g);
    ASSERT_TRUE(m.ok()) << entry.path() << ": " << m.status();
    EXPECT_EQ(CheckerVerdict(*m), "") << entry.path();
    ++checked;
  }
  EXPECT_GT(checked, 500);
}

}  // namespace
}  // namespace kiln::onnx_io

// The CPU engine's matrix products with transposed N-D operands (FusedMatMul's transA/transB
// as fold_transpose_into_matmul writes them): oneDNN's strided descriptors and Kiln's GEMM
// (the .avx2 twin runs the latter), against the reference interpreter on the graph before
// optimization, which still holds the Transposes.
#include <gtest/gtest.h>

#include <cmath>

#include "compiler/compile.h"
#include "ir/builder.h"
#include "ir/kiln_ops.h"
#include "ops/interpreter.h"
#include "runtime/check/differential.h"
#include "runtime/cpu/cpu_engine.h"

namespace kiln {
namespace {

Attribute Perm(std::vector<int64_t> p) { return Attribute::Ints(std::move(p)); }

Tensor Wave(std::vector<int64_t> shape) {
  Tensor t(DType::kFloat32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.SetDouble(i, std::sin(0.37 * i));
  return t;
}

// Compiles `g` at O2, checks that no Transpose survived and that the products read their
// operands transposed, and compares the engine's outputs with the reference on `g` itself.
void ExpectFoldedAndExact(std::unique_ptr<Graph> g, int want_transposes) {
  CompileOptions co;
  co.pipeline.level = OptLevel::kO2;
  absl::StatusOr<CompiledGraph> c = CompileGraph(*g, co);
  ASSERT_TRUE(c.ok()) << c.status();
  int transposes = 0, flagged = 0;
  for (const auto& n : c->graph->nodes()) {
    transposes += n->op_type == "Transpose";
    flagged += n->GetInt("transA", 0) + n->GetInt("transB", 0);
  }
  EXPECT_EQ(transposes, 0);
  EXPECT_EQ(flagged, want_transposes);
  absl::StatusOr<std::unique_ptr<runtime::Engine>> e = cpu::BuildCpuEngine(*c, {});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ((*e)->info().fallback_ops, 0);
  absl::StatusOr<ref::TensorMap> feeds = check::RandomInputs(*g, {});
  ASSERT_TRUE(feeds.ok()) << feeds.status();
  absl::StatusOr<ref::TensorMap> want = ref::Run(*g, *feeds);
  ASSERT_TRUE(want.ok()) << want.status();
  std::vector<Tensor> ins, outs;
  for (const auto& spec : (*e)->inputs()) ins.push_back(feeds->at(spec.name));
  ASSERT_TRUE((*e)->Run(ins, outs).ok());
  for (size_t k = 0; k < outs.size(); ++k) {
    const Tensor& w = want->at((*e)->outputs()[k].name);
    ASSERT_EQ(outs[k].shape(), w.shape());
    int bad = 0;
    for (int64_t i = 0; i < w.numel() && bad < 3; ++i) {
      const double a = outs[k].GetDouble(i), b = w.GetDouble(i);
      const bool ok = std::abs(a - b) <= 1e-5 + 1e-4 * std::abs(b);
      bad += !ok;
      EXPECT_TRUE(ok) << "output " << k << " element " << i << ": engine " << a << " reference " << b;
    }
  }
}

TEST(CpuTransposedMatMul, AttentionOverACacheWithScaleAndSoftmax) {
  // scores = softmax(q @ k^T * s) @ v over [batch 2, heads 3, new 2, past+new 9, dim 16].
  GraphBuilder b;
  Value* q = b.Input("q", DType::kFloat32, {2, 3, 2, 16});
  Value* k = b.Input("k", DType::kFloat32, {2, 3, 9, 16});
  Value* v = b.Input("v", DType::kFloat32, {2, 3, 9, 16});
  Value* kt = b.Op("Transpose", {k}, {{"perm", Perm({0, 1, 3, 2})}});
  Value* s = b.Op("Mul", {b.Op("MatMul", {q, kt}), b.Constant("s", Tensor::Scalar(DType::kFloat32, 0.25))});
  b.Output(b.Op("MatMul", {b.Op("Softmax", {s}, {{"axis", Attribute::Int(-1)}}), v}));
  ExpectFoldedAndExact(b.Build(), 1);
}

TEST(CpuTransposedMatMul, TransposedAAndBothBroadcastBatches) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 1, 7, 5});   // read as [2, 1, 5, 7]
  Value* y = b.Input("y", DType::kFloat32, {1, 3, 6, 7});   // read as [1, 3, 7, 6]
  Value* m = b.Input("m", DType::kFloat32, {4, 7, 9});      // read as [4, 9, 7]
  Value* w = b.Constant("w", Wave({11, 7}));  // constant B read as [7, 11]
  b.Output(b.Op("MatMul", {b.Op("Transpose", {x}, {{"perm", Perm({0, 1, 3, 2})}}),
                           b.Op("Transpose", {y}, {{"perm", Perm({0, 1, 3, 2})}})}));
  b.Output(b.Op("MatMul", {b.Op("Transpose", {m}, {{"perm", Perm({0, 2, 1})}}), b.Op("Transpose", {w})}));
  // The constant transpose folds away at compile time: three flags, not four.
  ExpectFoldedAndExact(b.Build(), 3);
}

// A decode step's attention: one new row per head against a cache of 77 positions, scaled and
// masked additively (the epilogue), then softmax and the values. The scores read the cached
// keys where they are (the few-rows path of the own GEMM, gemm_kernel.cc).
TEST(CpuTransposedMatMul, DecodeScoresReadTheCachedKeysWhereTheyAre) {
  GraphBuilder b;
  Value* q = b.Input("q", DType::kFloat32, {2, 3, 1, 64});
  Value* k = b.Input("k", DType::kFloat32, {2, 3, 77, 64});
  Value* v = b.Input("v", DType::kFloat32, {2, 3, 77, 64});
  Value* mask = b.Input("mask", DType::kFloat32, {2, 1, 1, 77});
  Value* kt = b.Op("Transpose", {k}, {{"perm", Perm({0, 1, 3, 2})}});
  Value* s = b.Op(
      "Mul", {b.Op("MatMul", {q, kt}), b.Constant("s", Tensor::Scalar(DType::kFloat32, 0.125))});
  Value* p = b.Op("Softmax", {b.Op("Add", {s, mask})}, {{"axis", Attribute::Int(-1)}});
  b.Output(b.Op("MatMul", {p, v}));
  ExpectFoldedAndExact(b.Build(), 1);
}

// Grouped heads (four query rows per key head, the keys broadcast over a batch dim) and a
// head size that leaves a tail at every vector width (20: 16 + 4, 8 + 8 + 4); then rows past
// the few-rows path's limit (9), which the GEMM takes, with the same answer.
TEST(CpuTransposedMatMul, FewRowsWithBroadcastKeysAndTailsAndManyRows) {
  for (int64_t rows : {4, 9}) {
    SCOPED_TRACE(rows);
    GraphBuilder b;
    Value* q = b.Input("q", DType::kFloat32, {2, 3, rows, 20});
    Value* k = b.Input("k", DType::kFloat32, {2, 1, 5, 20});
    b.Output(b.Op("MatMul", {q, b.Op("Transpose", {k}, {{"perm", Perm({0, 1, 3, 2})}})}));
    ExpectFoldedAndExact(b.Build(), 1);
  }
}

// The values' product of a decode step (one query row per head times the cached values as they
// are stored) reads them where they are, a few rows sharing each read: rows 1 to 5 (one
// group of four and a tail), values broadcast over the query heads of a group, and a head
// size with tails at every vector width; 9 rows take the GEMM, with the same answer.
TEST(CpuTransposedMatMul, FewRowsTimesValuesAsStoredEveryGroupAndTail) {
  for (int64_t rows : {1, 3, 5, 9}) {
    SCOPED_TRACE(rows);
    GraphBuilder b;
    Value* p = b.Input("p", DType::kFloat32, {2, 3, rows, 77});
    Value* v = b.Input("v", DType::kFloat32, {2, 1, 77, 20});
    b.Output(b.Op("MatMul", {p, v}));
    ExpectFoldedAndExact(b.Build(), 0);
  }
}

}  // namespace
}  // namespace kiln

// Batched products with transposed operands (ai.kiln FusedMatMul's transA/transB on N-D
// operands, as fold_transpose_into_matmul writes attention's q @ k^T): the cuBLASLt
// parameters the plan derives, checked by simulating cuBLASLt's documented strided-batched
// semantics on the host and comparing with the reference interpreter.
#include <gtest/gtest.h>

#include "compiler/shape/infer.h"
#include "ir/builder.h"
#include "ir/kiln_ops.h"
#include "ops/interpreter.h"
#include "runtime/check/compare.h"
#include "runtime/cuda/matmul_plan.h"
#include "tests/unit/test_tensors.h"

namespace kiln::cuda {
namespace {

using V = std::vector<int64_t>;

Tensor Random(V shape, uint32_t seed) { return testing::SeededUniform(std::move(shape), seed); }

// op(X)(r, c) of a column-major stored matrix X (element (i, j) at j * ld + i), batch `b`:
// CUBLAS_OP_T reads X(c, r).
float LtAt(const LtMatrix& x, const float* base, int64_t b, int64_t r, int64_t c) {
  const float* m = base + b * x.batch_stride;
  return x.transpose ? m[r * x.ld + c] : m[c * x.ld + r];
}

// cuBLASLt's strided-batched matmul as documented: for every batch b,
// D_b = alpha * op(A_b) op(B_b), D column-major with its own ld and batch stride. The plan's
// A is our B and its B our A (row-major seen as column-major).
Tensor CublasLtBatchedOnHost(const MatmulPlan& p, const Tensor& a, const Tensor& b, V y_shape) {
  Tensor y(DType::kFloat32, std::move(y_shape));
  for (int64_t bt = 0; bt < p.batch; ++bt) {
    for (int64_t j = 0; j < p.n; ++j) {
      for (int64_t i = 0; i < p.m; ++i) {
        double acc = 0;
        for (int64_t k = 0; k < p.k; ++k) {
          acc += double(LtAt(p.lt_a, b.data<float>(), bt, j, k)) * LtAt(p.lt_b, a.data<float>(), bt, k, i);
        }
        y.mutable_data<float>()[bt * p.lt_d.batch_stride + i * p.lt_d.ld + j] = p.alpha * static_cast<float>(acc);
      }
    }
  }
  return y;
}

struct Case {
  V a, b;
  int trans_a, trans_b;
};

TEST(MatmulPlan, BatchedTransposedOperandsComputeWhatFusedMatMulComputes) {
  // [batch, heads, rows, cols] scores against a key cache read transposed; A transposed;
  // both; a B shared by every batch.
  const std::vector<Case> cases = {{{2, 3, 1, 8}, {2, 3, 7, 8}, 0, 1},
                                   {{2, 3, 8, 4}, {2, 3, 8, 5}, 1, 0},
                                   {{2, 8, 4}, {2, 5, 8}, 1, 1},
                                   {{2, 3, 4, 8}, {5, 8}, 0, 1}};
  for (const Case& c : cases) {
    SCOPED_TRACE(std::to_string(c.a.size()) + "-D transA " + std::to_string(c.trans_a) + " transB " +
                 std::to_string(c.trans_b));
    GraphBuilder gb;
    Value* y = gb.Op(kiln_ops::kFusedMatMul,
                     {gb.Input("a", DType::kFloat32, ToShape(c.a)), gb.Input("b", DType::kFloat32, ToShape(c.b))},
                     {{"transA", Attribute::Int(c.trans_a)}, {"transB", Attribute::Int(c.trans_b)},
                      {"alpha", Attribute::Float(0.5f)}},
                     kKilnDomain);
    gb.Output(y);
    std::unique_ptr<Graph> g = gb.Build();
    ASSERT_TRUE(shape::InferShapes(*g).ok());
    ref::TensorMap feeds{{"a", Random(c.a, 1)}, {"b", Random(c.b, 2)}};
    absl::StatusOr<ref::TensorMap> want = ref::Run(*g, feeds);
    ASSERT_TRUE(want.ok()) << want.status();
    absl::StatusOr<MatmulPlan> p = PlanMatmul(*g->nodes()[0]);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->lt_a.transpose, c.trans_b != 0);
    EXPECT_EQ(p->lt_b.transpose, c.trans_a != 0);
    const Tensor got = CublasLtBatchedOnHost(*p, feeds["a"], feeds["b"], want->at(y->name).shape());
    const check::Divergence d = check::CompareTensors(got, want->at(y->name), {1e-5, 1e-5});
    EXPECT_TRUE(d.ok) << d.message;
  }
}

TEST(MatmulPlan, RefusesATransposedVectorAndNDGemm) {
  GraphBuilder gb;
  Value* a = gb.Input("a", DType::kFloat32, {2, 3, 4});
  Value* v = gb.Input("v", DType::kFloat32, {4});
  Value* y = gb.Op(kiln_ops::kFusedMatMul, {a, v}, {}, kKilnDomain);
  gb.Output(y);
  std::unique_ptr<Graph> g = gb.Build();
  ASSERT_TRUE(shape::InferShapes(*g).ok());
  Node& n = *g->nodes()[0];
  ASSERT_TRUE(PlanMatmul(n).ok());
  n.attrs["transB"] = Attribute::Int(1);  // a vector has no last two dims to swap
  EXPECT_TRUE(absl::IsInvalidArgument(PlanMatmul(n).status()));
  // The shape rule refuses it too.
  EXPECT_FALSE(shape::InferShapes(*g).ok());
}

}  // namespace
}  // namespace kiln::cuda

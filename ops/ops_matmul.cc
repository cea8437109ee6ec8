// Gemm and MatMul. Float types accumulate in double (gemm_f64.h: register-tiled, the same
// bits at every ISA level); MatMul on integers accumulates in wrapping 64-bit arithmetic and
// truncates to the output type, which is what numpy's matmul gives for int32/int64/uint*
// operands. The integer loop is a row of B times one A element added into a row of C
// (contiguous), blocked over k and n so the B block stays in cache.
#include <algorithm>

#include "ops/gemm_f64.h"
#include "ops/kernel_util.h"
#include "ops/nn_ops.h"

namespace kiln::ref::nn {
namespace {

// c[m x n] += a[m x k] * b[k x n], all row-major.
template <class T>
void GemmRows(const T* a, const T* b, T* c, int64_t i0, int64_t i1, int64_t k, int64_t n,
              int64_t kBlockK, int64_t kBlockN) {
  for (int64_t k0 = 0; k0 < k; k0 += kBlockK) {
    const int64_t k1 = std::min(k, k0 + kBlockK);
    for (int64_t n0 = 0; n0 < n; n0 += kBlockN) {
      const int64_t n1 = std::min(n, n0 + kBlockN);
      for (int64_t i = i0; i < i1; ++i) {
        T* __restrict crow = c + i * n;
        for (int64_t p = k0; p < k1; ++p) {
          const T av = a[i * k + p];
          const T* __restrict brow = b + p * n;
          for (int64_t j = n0; j < n1; ++j) crow[j] += av * brow[j];
        }
      }
    }
  }
}

// Rows are independent, so large products split them over the OpenMP team: each element
// still sums its terms in the same order, so the result is the serial one, bit for bit.
void GemmAccumulate(const uint64_t* a, const uint64_t* b, uint64_t* c, int64_t m, int64_t k,
                    int64_t n) {
  constexpr int64_t kBlockK = 128, kBlockN = 512, kRows = 8;
#pragma omp parallel for schedule(static) if (m * n * k >= (int64_t{1} << 20) && m > kRows)
  for (int64_t r0 = 0; r0 < m; r0 += kRows) {
    GemmRows(a, b, c, r0, std::min(m, r0 + kRows), k, n, kBlockK, kBlockN);
  }
}

void GemmAccumulate(const double* a, const double* b, double* c, int64_t m, int64_t k, int64_t n) {
  GemmF64(a, b, c, m, k, n);
}

void GemmAccumulate(const float* a, const float* b, double* c, int64_t m, int64_t k, int64_t n) {
  GemmF64(a, b, c, m, k, n);
}

// Integer elements as wrapping uint64 (two's complement for signed types).
std::vector<uint64_t> ToWrapped(const Tensor& t) {
  std::vector<uint64_t> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) {
    v[i] = t.dtype() == DType::kUInt64 ? t.GetUInt(i) : static_cast<uint64_t>(t.GetInt(i));
  }
  return v;
}

// The operands of one MatMul, promoted to at least 2-D, and the broadcast batch.
struct MatMulShape {
  std::vector<int64_t> a_batch, b_batch, batch, out;
  int64_t m = 1, k = 1, n = 1;
};

absl::StatusOr<MatMulShape> MatMulShapes(const Node& node, std::vector<int64_t> a,
                                         std::vector<int64_t> b) {
  if (a.empty() || b.empty()) return InvalidInput(node, "MatMul operands must have rank >= 1");
  const bool a_vec = a.size() == 1, b_vec = b.size() == 1;
  if (a_vec) a.insert(a.begin(), 1);
  if (b_vec) b.push_back(1);
  MatMulShape s;
  s.m = a[a.size() - 2];
  s.k = a.back();
  s.n = b.back();
  if (b[b.size() - 2] != s.k) {
    return InvalidInput(node, "inner dims differ: " + ShapeToString(a) + " x " + ShapeToString(b));
  }
  s.a_batch.assign(a.begin(), a.end() - 2);
  s.b_batch.assign(b.begin(), b.end() - 2);
  ASSIGN_OR_RETURN(s.batch, BroadcastShapes(node, {s.a_batch, s.b_batch}));
  s.out = s.batch;
  if (!a_vec) s.out.push_back(s.m);
  if (!b_vec) s.out.push_back(s.n);
  RETURN_IF_ERROR(CheckedNumel(node, s.out).status());
  return s;
}

// Runs every batch entry of a MatMul over operands of element type T, accumulating in Acc.
template <class Acc, class T>
std::vector<Acc> BatchedMatMul(const MatMulShape& s, const T* a, const T* b) {
  const int64_t batches = NumElements(s.batch);
  std::vector<Acc> c(static_cast<size_t>(batches * s.m * s.n), Acc{0});
  BroadcastIndexer ia(s.a_batch, s.batch), ib(s.b_batch, s.batch);
  for (int64_t bi = 0; bi < batches; ++bi) {
    GemmAccumulate(a + ia(bi) * s.m * s.k, b + ib(bi) * s.k * s.n, c.data() + bi * s.m * s.n, s.m,
                   s.k, s.n);
  }
  return c;
}

// Float MatMul in double: float32 and float64 operands are read in place, the 16-bit types
// widened first.
std::vector<double> FloatMatMul(const MatMulShape& s, const Tensor& a, const Tensor& b) {
  if (a.dtype() == DType::kFloat32) {
    return BatchedMatMul<double>(s, a.data<float>(), b.data<float>());
  }
  if (a.dtype() == DType::kFloat64) {
    return BatchedMatMul<double>(s, a.data<double>(), b.data<double>());
  }
  const std::vector<double> aw = ToDoubles(a), bw = ToDoubles(b);
  return BatchedMatMul<double>(s, aw.data(), bw.data());
}

absl::StatusOr<std::vector<Tensor>> MatMul(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* a, RequireInput(node, in, 0));
  ASSIGN_OR_RETURN(const Tensor* b, RequireInput(node, in, 1));
  RETURN_IF_ERROR(CheckNumeric(node, *a));
  if (a->dtype() != b->dtype()) return InvalidInput(node, "A and B dtypes differ");
  ASSIGN_OR_RETURN(MatMulShape s, MatMulShapes(node, a->shape(), b->shape()));
  if (IsFloatDType(a->dtype())) {
    return std::vector<Tensor>{FromDoubles(a->dtype(), s.out, FloatMatMul(s, *a, *b))};
  }
  const std::vector<uint64_t> aw = ToWrapped(*a), bw = ToWrapped(*b);
  std::vector<uint64_t> c = BatchedMatMul<uint64_t>(s, aw.data(), bw.data());
  Tensor out(a->dtype(), s.out);
  for (int64_t i = 0; i < out.numel(); ++i) out.SetUInt(i, c[i]);
  return std::vector<Tensor>{std::move(out)};
}

// v (rows x cols, row-major) transposed.
template <class T>
std::vector<T> Transposed(const T* v, int64_t rows, int64_t cols) {
  std::vector<T> t(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = v[r * cols + c];
  }
  return t;
}

// A (m x k) times B (k x n) in double, each operand stored transposed when its flag says so.
template <class T>
std::vector<double> GemmProduct(const T* a, const T* b, bool ta, bool tb, int64_t m, int64_t k,
                                int64_t n) {
  std::vector<T> a_t, b_t;
  if (ta) a = (a_t = Transposed(a, k, m)).data();
  if (tb) b = (b_t = Transposed(b, n, k)).data();
  std::vector<double> y(static_cast<size_t>(m * n), 0.0);
  GemmAccumulate(a, b, y.data(), m, k, n);
  return y;
}

absl::StatusOr<std::vector<Tensor>> Gemm(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* at, RequireInput(node, in, 0));
  ASSIGN_OR_RETURN(const Tensor* bt, RequireInput(node, in, 1));
  RETURN_IF_ERROR(CheckNumeric(node, *at));
  if (at->dtype() != bt->dtype()) return InvalidInput(node, "A and B dtypes differ");
  if (at->rank() != 2 || bt->rank() != 2) return InvalidInput(node, "A and B must be 2-D");
  const bool ta = node.GetInt("transA", 0) != 0, tb = node.GetInt("transB", 0) != 0;
  const int64_t m = ta ? at->dim(1) : at->dim(0), k = ta ? at->dim(0) : at->dim(1);
  const int64_t n = tb ? bt->dim(0) : bt->dim(1);
  if ((tb ? bt->dim(1) : bt->dim(0)) != k) {
    return InvalidInput(node, "inner dims differ: A " + ShapeToString(at->shape()) + ", B " +
                                  ShapeToString(bt->shape()));
  }
  RETURN_IF_ERROR(CheckedNumel(node, {m, n}).status());
  std::vector<double> y;
  if (at->dtype() == DType::kFloat32) {
    y = GemmProduct(at->data<float>(), bt->data<float>(), ta, tb, m, k, n);
  } else {
    const std::vector<double> a = ToDoubles(*at), b = ToDoubles(*bt);
    y = GemmProduct(a.data(), b.data(), ta, tb, m, k, n);
  }
  const double alpha = node.GetFloat("alpha", 1.0f), beta = node.GetFloat("beta", 1.0f);
  std::vector<double> c;
  if (in.size() > 2 && in[2]) {
    if (in[2]->dtype() != at->dtype()) return InvalidInput(node, "C dtype differs from A");
    ASSIGN_OR_RETURN(c, BroadcastTo(node, *in[2], {m, n}));
  }
  for (size_t i = 0; i < y.size(); ++i) y[i] = alpha * y[i] + (c.empty() ? 0.0 : beta * c[i]);
  return std::vector<Tensor>{FromDoubles(at->dtype(), {m, n}, y)};
}

}  // namespace

void RegisterMatMulKernels(KernelRegistry& r) {
  r.Register("", "MatMul", MatMul);
  r.Register("", "Gemm", Gemm);
}

}  // namespace kiln::ref::nn

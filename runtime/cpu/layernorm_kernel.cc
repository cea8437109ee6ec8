// LayerNormalization (float32) over the trailing dims [axis, rank): per row, mean and
// variance accumulated in double (as the reference does), then scale and bias. Scale and
// bias must cover exactly the normalized dims; the optional Mean/InvStdDev outputs are left
// to the reference.
#include <cmath>

#include "runtime/cpu/isa.h"
#include "runtime/cpu/own_kernels.h"

namespace kiln::cpu {
namespace {

// One row: mean and variance in double (the reference's precision; the lanes of the SIMD
// reductions reassociate its sum, nothing more), then scale and bias. `x` may equal `y`.
KILN_ISA_BODY void NormalizeRowBody(const float* x, const float* g, const float* b, float* y,
                                     int64_t n, float eps) {
  double sum = 0.0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  double sq = 0.0;
#pragma omp simd reduction(+ : sq)
  for (int64_t i = 0; i < n; ++i) {
    const float d = x[i] - mean;
    sq += static_cast<double>(d) * d;
  }
  const float inv = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(n) + eps));
  if (b) {
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * inv * g[i] + b[i];
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * inv * g[i] + 0.f;
  }
}
KILN_ISA_VERSIONS(void, NormalizeRow,
                  (const float* x, const float* g, const float* b, float* y, int64_t n,
                   float eps),
                  (x, g, b, y, n, eps))


class LayerNormKernel : public CpuKernel {
 public:
  bool follows_team() const override { return true; }
  LayerNormKernel(int x, int scale, int bias, int y, int64_t rows, int64_t n, float eps)
      : x_(x), scale_(scale), bias_(bias), y_(y), rows_(rows), n_(n), eps_(eps) {}

  absl::Status Run(const ExecContext& ctx) override {
    const float* x = static_cast<const float*>(ctx.ptrs[x_]);
    const float* g = static_cast<const float*>(ctx.ptrs[scale_]);
    const float* b = bias_ < 0 ? nullptr : static_cast<const float*>(ctx.ptrs[bias_]);
    float* y = static_cast<float*>(ctx.ptrs[y_]);
    const int64_t rows = rows_, n = n_;
    const float eps = eps_;
    ForEachIndex(rows, rows * n >= kParallelElements,
                 [&](int64_t r) { NormalizeRow(x + r * n, g, b, y + r * n, n, eps); });
    return absl::OkStatus();
  }

 private:
  int x_, scale_, bias_, y_;
  int64_t rows_, n_;
  float eps_;
};

// Whether `s` (scale or bias) spans exactly dims [axis, rank) of `x`.
bool CoversTrailing(const std::vector<int64_t>& s, const std::vector<int64_t>& x, int64_t axis) {
  if (s.size() > x.size()) return false;
  const size_t pad = x.size() - s.size();
  for (size_t d = 0; d < x.size(); ++d) {
    const int64_t sd = d < pad ? 1 : s[d - pad];
    const int64_t want = static_cast<int64_t>(d) < axis ? 1 : x[d];
    if (sd != want) return false;
  }
  return true;
}

}  // namespace

std::unique_ptr<CpuKernel> MakeLayerNormKernel(BuildContext& ctx, const Node& node) {
  if (!node.domain.empty() || node.op_type != "LayerNormalization") return nullptr;
  if (node.output(1) || node.output(2)) return nullptr;
  const int x = ctx.SlotOf(node.input(0)), g = ctx.SlotOf(node.input(1));
  const int b = ctx.SlotOf(node.input(2)), y = ctx.SlotOf(node.output(0));
  if (x < 0 || g < 0 || y < 0) return nullptr;
  for (int s : {x, g, b, y}) {
    if (s >= 0 && (ctx.slots[s].dtype != DType::kFloat32 || !ctx.slots[s].is_plain())) {
      return nullptr;
    }
  }
  const std::vector<int64_t>& shape = ctx.slots[x].shape;
  const int64_t rank = static_cast<int64_t>(shape.size());
  int64_t axis = node.GetInt("axis", -1);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank || !CoversTrailing(ctx.slots[g].shape, shape, axis) ||
      (b >= 0 && !CoversTrailing(ctx.slots[b].shape, shape, axis))) {
    return nullptr;
  }
  int64_t rows = 1, n = 1;
  for (int64_t d = 0; d < rank; ++d) (d < axis ? rows : n) *= shape[d];
  if (n == 0) return nullptr;
  return std::make_unique<LayerNormKernel>(x, g, b, y, rows, n, node.GetFloat("epsilon", 1e-5f));
}

}  // namespace kiln::cpu

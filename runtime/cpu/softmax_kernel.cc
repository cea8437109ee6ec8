// Softmax (float32) along one axis: for each (outer, inner) line of `n` elements, subtract
// the max, exponentiate, normalize. Opset < 13 flattens everything from `axis` on into the
// line, as that version specified.
#include <cmath>

#include "runtime/cpu/isa.h"
#include "runtime/cpu/own_kernels.h"
#include "runtime/cpu/vector_math.h"

namespace kiln::cpu {
namespace {

// One line of `n` elements `s` apart; `x` may equal `y`. The max is a compare, not fmaxf
// (a libm call): both skip NaN the same way, m starting at -inf. The exponentials are one
// vectorized loop and the sum another (a SIMD reduction: its lanes reassociate the sum).
KILN_ISA_BODY void SoftmaxLineBody(const float* x, float* y, int64_t n, int64_t s) {
  float m = -INFINITY;
  for (int64_t j = 0; j < n; ++j) m = x[j * s] > m ? x[j * s] : m;
  // vmath::Exp vectorizes; masked scores (-inf, -1e9) come out as 0.
  for (int64_t j = 0; j < n; ++j) y[j * s] = vmath::Exp(x[j * s] - m);
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < n; ++j) sum += y[j * s];
  const float inv = 1.f / sum;
  for (int64_t j = 0; j < n; ++j) y[j * s] *= inv;
}
KILN_ISA_VERSIONS(void, SoftmaxLine, (const float* x, float* y, int64_t n, int64_t s),
                  (x, y, n, s))


class SoftmaxKernel : public CpuKernel {
 public:
  bool follows_team() const override { return true; }
  SoftmaxKernel(int in, int out, int64_t outer, int64_t n, int64_t inner)
      : in_(in), out_(out), outer_(outer), n_(n), inner_(inner) {}

  absl::Status Run(const ExecContext& ctx) override {
    const float* x = static_cast<const float*>(ctx.ptrs[in_]);
    float* y = static_cast<float*>(ctx.ptrs[out_]);
    const int64_t lines = outer_ * inner_, n = n_, inner = inner_;
    ForEachIndex(lines, lines * n >= kParallelElements, [&](int64_t l) {
      const int64_t base = (l / inner) * n * inner + l % inner;
      SoftmaxLine(x + base, y + base, n, inner);
    });
    return absl::OkStatus();
  }

 private:
  int in_, out_;
  int64_t outer_, n_, inner_;
};

}  // namespace

std::unique_ptr<CpuKernel> MakeSoftmaxKernel(BuildContext& ctx, const Node& node) {
  if (!node.domain.empty() || node.op_type != "Softmax") return nullptr;
  int in = ctx.SlotOf(node.input(0));
  const int out = ctx.SlotOf(node.output(0));
  if (in < 0 || out < 0 || ctx.slots[in].dtype != DType::kFloat32) return nullptr;
  const std::vector<int64_t> shape = ctx.slots[in].shape;
  const int64_t rank = static_cast<int64_t>(shape.size());
  int64_t axis = node.GetInt("axis", node.opset < 13 ? 1 : -1);
  if (axis < 0) axis += rank;
  if (rank == 0 || axis < 0 || axis >= rank) return nullptr;
  int64_t outer = 1, n = 1, inner = 1;
  for (int64_t d = 0; d < rank; ++d) {
    if (d < axis) outer *= shape[d];
    else if (d == axis || node.opset < 13) n *= shape[d];
    else inner *= shape[d];
  }
  if (n == 0) return nullptr;
  if (!ctx.slots[in].is_plain()) in = ctx.ReadAs(in, ctx.PlainMd(in));
  return std::make_unique<SoftmaxKernel>(in, out, outer, n, inner);
}

}  // namespace kiln::cpu

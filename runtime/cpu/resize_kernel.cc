// Resize with constant roi/scales/sizes, from ref::PlanResize (the reference's own taps, so
// the two agree on every coordinate transform, rounding rule and kernel). Nearest mode is an
// axis gather (axis_gather.h), exact for any dtype. Linear and cubic on float32 apply one
// 1-D interpolation per resized axis (shrinking axes first, as the reference), through two
// scratch buffers the kernel owns, each pass split over its outer rows.
#include <algorithm>
#include <cstring>

#include "ops/resize_plan.h"
#include "runtime/cpu/axis_gather.h"
#include "runtime/cpu/own_kernels.h"

namespace kiln::cpu {
namespace {

struct Tap {
  int64_t index;
  float weight;
};

// One 1-D interpolation: [outer, in, inner] -> [outer, out, inner].
struct AxisPass {
  int64_t outer = 1, in = 0, out = 0, inner = 1;
  std::vector<std::vector<Tap>> taps;  // per output position; none = extrapolation value
};

class InterpKernel : public CpuKernel {
 public:
  bool follows_team() const override { return true; }
  InterpKernel(int in, int out, std::vector<AxisPass> passes, float extrapolation)
      : in_(in), out_(out), passes_(std::move(passes)), extrapolation_(extrapolation) {
    size_t largest = 0;
    for (size_t k = 0; k + 1 < passes_.size(); ++k) {
      const AxisPass& p = passes_[k];
      largest = std::max<size_t>(largest, p.outer * p.out * p.inner);
    }
    for (auto& s : scratch_) s.resize(largest);  // allocated once: Run allocates nothing
  }

  absl::Status Run(const ExecContext& ctx) override {
    const float* src = static_cast<const float*>(ctx.ptrs[in_]);
    for (size_t k = 0; k < passes_.size(); ++k) {
      float* dst = k + 1 == passes_.size() ? static_cast<float*>(ctx.ptrs[out_])
                                           : scratch_[k % 2].data();
      Apply(passes_[k], src, dst);
      src = dst;
    }
    return absl::OkStatus();
  }

 private:
  void Apply(const AxisPass& p, const float* src, float* dst) const {
    const bool parallel = p.outer * p.out * p.inner >= kParallelElements;
    ForEachIndex(p.outer, parallel, [&](int64_t o) {
      const float* x = src + o * p.in * p.inner;
      float* y = dst + o * p.out * p.inner;
      for (int64_t j = 0; j < p.out; ++j, y += p.inner) {
        const std::vector<Tap>& taps = p.taps[j];
        if (taps.empty()) {
          std::fill(y, y + p.inner, extrapolation_);
          continue;
        }
        const float* r0 = x + taps[0].index * p.inner;
        const float w0 = taps[0].weight;
        for (int64_t i = 0; i < p.inner; ++i) y[i] = w0 * r0[i];
        for (size_t t = 1; t < taps.size(); ++t) {
          const float* r = x + taps[t].index * p.inner;
          const float w = taps[t].weight;
          for (int64_t i = 0; i < p.inner; ++i) y[i] += w * r[i];
        }
      }
    });
  }

  int in_, out_;
  std::vector<AxisPass> passes_;
  float extrapolation_;
  std::vector<float> scratch_[2];
};

// The reference's plan for this node, its roi/scales/sizes read from constants.
std::optional<ref::ResizePlan> PlanOf(const Node& node, const std::vector<int64_t>& shape) {
  ref::KernelInputs kin(node.inputs.size(), nullptr);
  for (size_t i = 1; i < node.inputs.size(); ++i) {
    const Value* v = node.input(i);
    if (!v) continue;
    if (!v->is_constant()) return std::nullopt;
    kin[i] = &*v->constant;
  }
  absl::StatusOr<ref::ResizePlan> plan = ref::PlanResize(node, shape, kin);
  if (!plan.ok()) return std::nullopt;
  return std::move(*plan);
}

std::unique_ptr<CpuKernel> NearestKernel(int in, int out, const ref::ResizePlan& plan,
                                         const std::vector<int64_t>& xs, DType dtype) {
  AxisGatherPlan p;
  p.elem = DTypeSize(dtype);
  p.in_strides = ContiguousStrides(xs);
  for (const ref::ResizeAxisPlan& a : plan.axes) {
    p.out_shape.push_back(a.out);
    std::vector<int64_t> m(a.out);
    for (int64_t j = 0; j < a.out; ++j) {
      m[j] = !a.resized ? j : a.taps[j].empty() ? -1 : a.taps[j][0].index;
    }
    p.map.push_back(std::move(m));
  }
  const Tensor fill = Tensor::Scalar(dtype, plan.extrapolation);
  std::vector<unsigned char> bytes(p.elem);
  std::memcpy(bytes.data(), fill.raw(), p.elem);
  return MakeAxisGather(in, out, std::move(p), std::move(bytes));
}

std::vector<AxisPass> Passes(const ref::ResizePlan& plan, std::vector<int64_t> shape) {
  std::vector<AxisPass> passes;
  for (int64_t d : plan.order) {
    const ref::ResizeAxisPlan& a = plan.axes[d];
    AxisPass p;
    for (int64_t k = 0; k < d; ++k) p.outer *= shape[k];
    for (size_t k = d + 1; k < shape.size(); ++k) p.inner *= shape[k];
    p.in = a.in;
    p.out = a.out;
    for (const auto& taps : a.taps) {
      std::vector<Tap> t;
      for (const ref::ResizeTap& r : taps) t.push_back({r.index, static_cast<float>(r.weight)});
      p.taps.push_back(std::move(t));
    }
    shape[d] = a.out;
    passes.push_back(std::move(p));
  }
  return passes;
}

}  // namespace

std::unique_ptr<CpuKernel> MakeResizeKernel(BuildContext& ctx, const Node& node) {
  if (!node.domain.empty() || node.op_type != "Resize") return nullptr;
  const int in = ctx.SlotOf(node.input(0)), out = ctx.SlotOf(node.output(0));
  if (in < 0 || out < 0 || !ctx.slots[in].is_plain()) return nullptr;
  const std::vector<int64_t>& xs = ctx.slots[in].shape;
  const DType dtype = ctx.slots[in].dtype;
  std::optional<ref::ResizePlan> plan = PlanOf(node, xs);
  if (!plan || xs.empty() || NumElements(xs) == 0) return nullptr;
  std::vector<int64_t> ys;
  for (const ref::ResizeAxisPlan& a : plan->axes) ys.push_back(a.out);
  if (ys != ctx.slots[out].shape || NumElements(ys) == 0) return nullptr;
  if (plan->nearest) {
    if (!IsWordSize(DTypeSize(dtype))) return nullptr;
    return NearestKernel(in, out, *plan, xs, dtype);
  }
  if (dtype != DType::kFloat32 || plan->order.empty()) return nullptr;
  return std::make_unique<InterpKernel>(in, out, Passes(*plan, xs),
                                        static_cast<float>(plan->extrapolation));
}

}  // namespace kiln::cpu

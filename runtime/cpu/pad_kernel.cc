// Pad of any dtype and mode (constant, edge, reflect, wrap; negative pads crop) with constant
// pads, axes and value: an axis gather (axis_gather.h) whose per-axis maps come from
// ref::PadSource, the reference's own rule, so the two agree on every mode.
#include <cstring>
#include <numeric>
#include <optional>

#include "ops/pad_source.h"
#include "runtime/cpu/axis_gather.h"
#include "runtime/cpu/own_kernels.h"

namespace kiln::cpu {
namespace {

std::optional<std::vector<int64_t>> ConstantInts(const Node& node, size_t i) {
  const Value* v = node.input(i);
  if (!v || !v->is_constant()) return std::nullopt;
  return v->constant->ToInt64Vector();
}

// Per-axis before-pads over all axes (after-pads into `after`), or nullopt for what the
// reference would refuse or what is not constant.
std::optional<std::vector<int64_t>> BeforeAfter(const Node& node, int64_t rank,
                                                std::vector<int64_t>& after) {
  std::optional<std::vector<int64_t>> pads = ConstantInts(node, 1);
  std::vector<int64_t> axes(rank);
  std::iota(axes.begin(), axes.end(), 0);
  if (node.input(3)) {
    std::optional<std::vector<int64_t>> a = ConstantInts(node, 3);
    if (!a) return std::nullopt;
    axes = *a;
  }
  const size_t na = axes.size();
  if (!pads || pads->size() != 2 * na) return std::nullopt;
  std::vector<int64_t> before(rank, 0);
  after.assign(rank, 0);
  for (size_t k = 0; k < na; ++k) {
    const int64_t axis = axes[k] < 0 ? axes[k] + rank : axes[k];
    if (axis < 0 || axis >= rank) return std::nullopt;
    before[axis] = (*pads)[k];
    after[axis] = (*pads)[k + na];
  }
  return before;
}

// The constant value's bytes (zero when absent); nullopt when it is fed at run time.
std::optional<std::vector<unsigned char>> FillBytes(const Node& node, DType dtype) {
  std::vector<unsigned char> fill(DTypeSize(dtype), 0);
  if (const Value* c = node.input(2)) {
    if (!c->is_constant() || c->constant->dtype() != dtype) return std::nullopt;
    if (c->constant->numel() > 0) std::memcpy(fill.data(), c->constant->raw(), fill.size());
  }
  return fill;
}

}  // namespace

std::unique_ptr<CpuKernel> MakePadKernel(BuildContext& ctx, const Node& node) {
  if (!node.domain.empty() || node.op_type != "Pad" || node.inputs.size() < 2) return nullptr;
  const int in = ctx.SlotOf(node.input(0)), out = ctx.SlotOf(node.output(0));
  if (in < 0 || out < 0 || !ctx.slots[in].is_plain()) return nullptr;
  const std::vector<int64_t>& xs = ctx.slots[in].shape;
  const int64_t rank = static_cast<int64_t>(xs.size());
  const std::string mode = node.GetString("mode", "constant");
  if (rank == 0 || (mode != "constant" && mode != "edge" && mode != "reflect" && mode != "wrap")) {
    return nullptr;
  }
  AxisGatherPlan p;
  p.elem = DTypeSize(ctx.slots[in].dtype);
  std::vector<int64_t> after;
  std::optional<std::vector<int64_t>> before = BeforeAfter(node, rank, after);
  std::optional<std::vector<unsigned char>> fill = FillBytes(node, ctx.slots[in].dtype);
  if (!IsWordSize(p.elem) || !before || !fill) return nullptr;
  p.in_strides = ContiguousStrides(xs);
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t n = xs[d] + (*before)[d] + after[d];
    if (n < 0 || (xs[d] == 0 && n > 0 && mode != "constant")) return nullptr;
    p.out_shape.push_back(n);
    std::vector<int64_t> m(n, -1);
    for (int64_t o = 0; o < n && xs[d] > 0; ++o) m[o] = ref::PadSource(o - (*before)[d], xs[d], mode);
    p.map.push_back(std::move(m));
  }
  if (p.out_shape != ctx.slots[out].shape) return nullptr;
  return MakeAxisGather(in, out, std::move(p), std::move(*fill));
}

}  // namespace kiln::cpu

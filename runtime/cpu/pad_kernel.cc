// Pad of any dtype and mode (constant, edge, reflect, wrap; negative pads crop) with constant
// pads, axes and value. Each axis's output-to-input index map is computed once at build
// (ref::PadSource, the reference's own rule, so the two agree); a run walks the output row
// by row: a row whose outer coordinates fall in a constant pad is filled, any other copies
// its interior span in one memcpy and maps the few padded elements around it.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <optional>

#include "runtime/cpu/own_kernels.h"
#include "runtime/reference/pad_source.h"

namespace kiln::cpu {
namespace {

struct PadPlan {
  std::vector<int64_t> out_shape, in_strides;
  std::vector<std::vector<int64_t>> map;  // per axis: output index -> input index, -1 = fill
  int64_t lo = 0, hi = 0;                 // innermost output span reading input lo - shift ..
  int64_t shift = 0;                      // input index = output index - shift on [lo, hi)
  size_t elem = 0;
};

class PadKernel : public CpuKernel {
 public:
  PadKernel(int in, int out, PadPlan plan, std::vector<unsigned char> fill)
      : in_(in), out_(out), p_(std::move(plan)), fill_(std::move(fill)),
        index_(p_.out_shape.size(), 0) {}

  absl::Status Run(const ExecContext& ctx) override {
    WithWordType(p_.elem, [&](auto word) { Walk<decltype(word)>(ctx); });
    return absl::OkStatus();
  }

 private:
  template <class T>
  void Walk(const ExecContext& ctx) {
    const T* x = static_cast<const T*>(ctx.ptrs[in_]);
    T* y = static_cast<T*>(ctx.ptrs[out_]);
    T fill;
    std::memcpy(&fill, fill_.data(), sizeof(T));
    const int64_t last = static_cast<int64_t>(p_.out_shape.size()) - 1;
    const int64_t n = p_.out_shape[last], rows = NumElements(p_.out_shape) / std::max<int64_t>(n, 1);
    const std::vector<int64_t>& inner = p_.map[last];
    std::fill(index_.begin(), index_.end(), 0);
    for (int64_t r = 0; r < rows; ++r, y += n) {
      int64_t base = 0;
      for (int64_t d = 0; d < last && base >= 0; ++d) {
        const int64_t i = p_.map[d][index_[d]];
        base = i < 0 ? -1 : base + i * p_.in_strides[d];
      }
      if (base < 0) {
        std::fill(y, y + n, fill);
      } else {
        for (int64_t j = 0; j < p_.lo; ++j) y[j] = inner[j] < 0 ? fill : x[base + inner[j]];
        std::memcpy(y + p_.lo, x + base + p_.lo - p_.shift, (p_.hi - p_.lo) * sizeof(T));
        for (int64_t j = p_.hi; j < n; ++j) y[j] = inner[j] < 0 ? fill : x[base + inner[j]];
      }
      for (int64_t d = last - 1; d >= 0; --d) {
        if (++index_[d] < p_.out_shape[d]) break;
        index_[d] = 0;
      }
    }
  }

  int in_, out_;
  PadPlan p_;
  std::vector<unsigned char> fill_;  // the constant value's bytes
  std::vector<int64_t> index_;
};

std::optional<std::vector<int64_t>> ConstantInts(const Node& node, size_t i) {
  const Value* v = node.input(i);
  if (!v || !v->is_constant()) return std::nullopt;
  return v->constant->ToInt64Vector();
}

// Per-axis before-pads over all axes, or nullopt for what the reference would refuse.
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

// The innermost map's identity span [lo, hi): output j reads input j - before.
void InteriorSpan(PadPlan& p, int64_t before, int64_t in_n) {
  const int64_t n = p.out_shape.back();
  p.shift = before;
  p.lo = std::clamp<int64_t>(before, 0, n);
  p.hi = std::clamp<int64_t>(before + in_n, p.lo, n);
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
  PadPlan p;
  p.elem = DTypeSize(ctx.slots[in].dtype);
  std::vector<int64_t> after;
  std::optional<std::vector<int64_t>> before = BeforeAfter(node, rank, after);
  if (!IsWordSize(p.elem) || !before) return nullptr;
  std::vector<unsigned char> fill(p.elem, 0);
  if (const Value* c = node.input(2)) {
    if (!c->is_constant() || c->constant->dtype() != ctx.slots[in].dtype) return nullptr;
    if (c->constant->numel() > 0) std::memcpy(fill.data(), c->constant->raw(), p.elem);
  }
  p.in_strides.assign(rank, 1);
  for (int64_t d = rank - 2; d >= 0; --d) p.in_strides[d] = p.in_strides[d + 1] * xs[d + 1];
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t n = xs[d] + (*before)[d] + after[d];
    if (n < 0 || (xs[d] == 0 && n > 0 && mode != "constant")) return nullptr;
    p.out_shape.push_back(n);
    std::vector<int64_t> m(n);
    for (int64_t o = 0; o < n; ++o) m[o] = xs[d] == 0 ? -1 : ref::PadSource(o - (*before)[d], xs[d], mode);
    p.map.push_back(std::move(m));
  }
  if (p.out_shape != ctx.slots[out].shape) return nullptr;
  InteriorSpan(p, (*before)[rank - 1], xs[rank - 1]);
  return std::make_unique<PadKernel>(in, out, std::move(p), std::move(fill));
}

}  // namespace kiln::cpu

// Transpose, Slice, Split and Expand of any dtype: the output is walked in order while an
// odometer over the output index tracks the input offset (from a start offset, by per-dim
// strides that may be negative, Slice's steps, or zero, Expand's broadcast dims); elements
// move as 1/2/4/8-byte words.
#include <algorithm>
#include <cstring>
#include <optional>

#include "runtime/cpu/own_kernels.h"

namespace kiln::cpu {
namespace {

class TransposeKernel : public WordKernel<TransposeKernel> {
 public:
  bool follows_team() const override { return true; }
  TransposeKernel(int in, int out, std::vector<int64_t> out_shape, std::vector<int64_t> in_strides,
                  size_t elem, int64_t start = 0)
      : WordKernel(elem),
        in_(in),
        out_(out),
        shape_(std::move(out_shape)),
        strides_(std::move(in_strides)),
        start_(start),
        index_(shape_.size(), 0) {}

  template <class T>
  void Walk(const ExecContext& ctx) {
    const T* x = static_cast<const T*>(ctx.ptrs[in_]);
    T* y = static_cast<T*>(ctx.ptrs[out_]);
    const int64_t total = NumElements(shape_);
    const int64_t last = static_cast<int64_t>(shape_.size()) - 1;
    std::fill(index_.begin(), index_.end(), 0);
    int64_t off = start_;
    for (int64_t i = 0; i < total;) {
      // The innermost output dim as one strided run.
      const int64_t n = shape_[last], s = strides_[last];
      for (int64_t j = 0; j < n; ++j) y[i + j] = x[off + j * s];
      i += n;
      for (int64_t d = last - 1; d >= 0; --d) {
        off += strides_[d];
        if (++index_[d] < shape_[d]) break;
        off -= strides_[d] * shape_[d];
        index_[d] = 0;
      }
    }
  }

 private:
  int in_, out_;
  std::vector<int64_t> shape_, strides_;
  int64_t start_;  // input offset of output element 0
  std::vector<int64_t> index_;
};

// Several walks run as one node's kernel (Split: one per output).
class KernelGroup : public CpuKernel {
 public:
  explicit KernelGroup(std::vector<std::unique_ptr<CpuKernel>> parts) : parts_(std::move(parts)) {}
  bool follows_team() const override {
    for (const auto& p : parts_) {
      if (!p->follows_team()) return false;
    }
    return true;
  }
  absl::Status Run(const ExecContext& ctx) override {
    for (auto& p : parts_) RETURN_IF_ERROR(p->Run(ctx));
    return absl::OkStatus();
  }

 private:
  std::vector<std::unique_ptr<CpuKernel>> parts_;
};

std::vector<int64_t> RowMajorStrides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d) {
    strides[d] = strides[d + 1] * shape[d + 1];
  }
  return strides;
}

}  // namespace

std::unique_ptr<CpuKernel> MakeTransposeKernel(BuildContext& ctx, const Node& node) {
  if (!node.domain.empty() || node.op_type != "Transpose") return nullptr;
  const int in = ctx.SlotOf(node.input(0)), out = ctx.SlotOf(node.output(0));
  if (in < 0 || out < 0 || !ctx.slots[in].is_plain()) return nullptr;
  const std::vector<int64_t>& xs = ctx.slots[in].shape;
  const size_t elem = DTypeSize(ctx.slots[in].dtype);
  const int64_t rank = static_cast<int64_t>(xs.size());
  if (rank == 0 || !IsWordSize(elem)) return nullptr;
  std::vector<int64_t> perm = node.GetInts("perm");
  if (perm.empty()) {
    for (int64_t d = rank - 1; d >= 0; --d) perm.push_back(d);
  }
  if (static_cast<int64_t>(perm.size()) != rank || NumElements(xs) == 0) return nullptr;
  std::vector<int64_t> in_strides(rank, 1), out_shape, strides;
  for (int64_t d = rank - 2; d >= 0; --d) in_strides[d] = in_strides[d + 1] * xs[d + 1];
  for (int64_t p : perm) {
    if (p < 0 || p >= rank) return nullptr;
    out_shape.push_back(xs[p]);
    strides.push_back(in_strides[p]);
  }
  if (out_shape != ctx.slots[out].shape) return nullptr;
  return std::make_unique<TransposeKernel>(in, out, out_shape, strides, elem);
}

// Slice with constant starts/ends/axes/steps (the opset-10+ inputs): output element i of
// dim d reads input index start[d] + i * step[d], so it is the same walk with strides
// scaled by the steps and a start offset. The output's shape comes from shape inference.
std::unique_ptr<CpuKernel> MakeSliceKernel(BuildContext& ctx, const Node& node) {
  if (!node.domain.empty() || node.op_type != "Slice" || node.inputs.size() < 3) return nullptr;
  const int in = ctx.SlotOf(node.input(0)), out = ctx.SlotOf(node.output(0));
  if (in < 0 || out < 0 || !ctx.slots[in].is_plain()) return nullptr;
  auto ints = [&](size_t i) -> std::optional<std::vector<int64_t>> {
    const Value* v = node.input(i);
    if (!v || !v->is_constant()) return std::nullopt;
    return v->constant->ToInt64Vector();
  };
  const std::vector<int64_t>& xs = ctx.slots[in].shape;
  const int64_t rank = static_cast<int64_t>(xs.size());
  const size_t elem = DTypeSize(ctx.slots[in].dtype);
  auto starts = ints(1);
  std::optional<std::vector<int64_t>> axes = node.input(3) ? ints(3) : std::nullopt;
  std::optional<std::vector<int64_t>> steps = node.input(4) ? ints(4) : std::nullopt;
  if (!starts || (node.input(3) && !axes) || (node.input(4) && !steps)) return nullptr;
  if (!axes) {
    axes.emplace();
    for (int64_t d = 0; d < static_cast<int64_t>(starts->size()); ++d) axes->push_back(d);
  }
  if (!steps) steps = std::vector<int64_t>(starts->size(), 1);
  if (axes->size() != starts->size() || steps->size() != starts->size() || rank == 0 ||
      !IsWordSize(elem) || NumElements(ctx.slots[out].shape) == 0) {
    return nullptr;
  }
  std::vector<int64_t> in_strides(rank, 1), first(rank, 0), step(rank, 1);
  for (int64_t d = rank - 2; d >= 0; --d) in_strides[d] = in_strides[d + 1] * xs[d + 1];
  for (size_t k = 0; k < axes->size(); ++k) {
    const int64_t a = (*axes)[k] < 0 ? (*axes)[k] + rank : (*axes)[k];
    if (a < 0 || a >= rank || (*steps)[k] == 0) return nullptr;
    int64_t s = (*starts)[k];
    if (s < 0) s += xs[a];
    // ONNX clamps starts to [0, dim] (positive steps) or [0, dim - 1] (negative ones).
    s = std::clamp<int64_t>(s, 0, (*steps)[k] > 0 ? xs[a] : xs[a] - 1);
    first[a] = s;
    step[a] = (*steps)[k];
  }
  int64_t start = 0;
  std::vector<int64_t> strides(rank);
  for (int64_t d = 0; d < rank; ++d) {
    start += first[d] * in_strides[d];
    strides[d] = in_strides[d] * step[d];
  }
  return std::make_unique<TransposeKernel>(in, out, ctx.slots[out].shape, strides, elem, start);
}

// Split along `axis`: output k is the slab that starts where the earlier outputs end (their
// sizes come from shape inference, whichever way the split was given).
std::unique_ptr<CpuKernel> MakeSplitKernel(BuildContext& ctx, const Node& node) {
  if (!node.domain.empty() || node.op_type != "Split") return nullptr;
  const int in = ctx.SlotOf(node.input(0));
  if (in < 0 || !ctx.slots[in].is_plain()) return nullptr;
  const std::vector<int64_t>& xs = ctx.slots[in].shape;
  const int64_t rank = static_cast<int64_t>(xs.size());
  const size_t elem = DTypeSize(ctx.slots[in].dtype);
  int64_t axis = node.GetInt("axis", 0);
  if (axis < 0) axis += rank;
  if (rank == 0 || axis < 0 || axis >= rank || !IsWordSize(elem)) return nullptr;
  const std::vector<int64_t> in_strides = RowMajorStrides(xs);
  std::vector<std::unique_ptr<CpuKernel>> parts;
  int64_t offset = 0;
  for (const Value* v : node.outputs) {
    const int out = ctx.SlotOf(v);
    if (out < 0) return nullptr;
    const std::vector<int64_t>& ys = ctx.slots[out].shape;
    if (static_cast<int64_t>(ys.size()) != rank) return nullptr;
    for (int64_t d = 0; d < rank; ++d) {
      if (d != axis && ys[d] != xs[d]) return nullptr;
    }
    if (NumElements(ys) > 0) {
      parts.push_back(std::make_unique<TransposeKernel>(in, out, ys, in_strides, elem,
                                                        offset * in_strides[axis]));
    }
    offset += ys[axis];
  }
  if (offset != xs[axis]) return nullptr;
  return std::make_unique<KernelGroup>(std::move(parts));
}

// Expand: the walk with the broadcast strides (0 on every dim the input repeats).
std::unique_ptr<CpuKernel> MakeExpandKernel(BuildContext& ctx, const Node& node) {
  if (!node.domain.empty() || node.op_type != "Expand") return nullptr;
  const int in = ctx.SlotOf(node.input(0)), out = ctx.SlotOf(node.output(0));
  if (in < 0 || out < 0 || !ctx.slots[in].is_plain()) return nullptr;
  const std::vector<int64_t>& ys = ctx.slots[out].shape;
  const size_t elem = DTypeSize(ctx.slots[in].dtype);
  if (ys.empty() || NumElements(ys) == 0 || !IsWordSize(elem)) return nullptr;
  std::optional<std::vector<int64_t>> strides = BroadcastStrides(ctx.slots[in].shape, ys);
  if (!strides) return nullptr;
  return std::make_unique<TransposeKernel>(in, out, ys, *strides, elem);
}

}  // namespace kiln::cpu

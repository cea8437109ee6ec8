// Element-wise programs over activations in a convolution's layout (elementwise_kernel.h):
// channels-last or blocked float programs with per-channel operands, and QDQ programs on
// 8-bit activations in one shared unpadded layout.
#include "ir/kiln_ops.h"
#include "runtime/cpu/elementwise_kernel.h"
#include "runtime/cpu/quantize_math.h"

namespace kiln::cpu {

using ew::Instr;
using ew::Op;

std::optional<std::vector<int64_t>> PerChannel(std::vector<int64_t> s,
                                               const std::vector<int64_t>& y) {
  if (s.size() > y.size()) return std::nullopt;
  s.insert(s.begin(), y.size() - s.size(), 1);
  if ((s[0] != 1 && s[0] != y[0]) || (s[1] != 1 && s[1] != y[1])) return std::nullopt;
  for (size_t d = 2; d < s.size(); ++d) {
    if (s[d] != 1) return std::nullopt;
  }
  return s;
}

namespace {

bool FloatValue(const Value* v) {
  return v && v->dtype == DType::kFloat32 && v->shape && IsStatic(*v->shape);
}

// The iteration space in memory order: [N, spatial..., C] channels-last, [N, C/b, spatial...,
// b] blocked; and the element strides there of a per-channel operand of shape `s`.
std::vector<int64_t> MemoryOrderDims(const std::vector<int64_t>& y, ChannelLayout l, int b) {
  std::vector<int64_t> d = {y[0]};
  if (l == ChannelLayout::kBlocked) d.push_back(y[1] / b);
  d.insert(d.end(), y.begin() + 2, y.end());
  d.push_back(l == ChannelLayout::kBlocked ? b : y[1]);
  return d;
}

std::vector<int64_t> PerChannelStrides(const std::vector<int64_t>& s, const std::vector<int64_t>& y,
                                       ChannelLayout l, int b) {
  const int64_t c_stride = s[1] == 1 ? 0 : 1;
  const int64_t n_stride = s[0] == 1 ? 0 : s[1];
  std::vector<int64_t> st = {n_stride};
  if (l == ChannelLayout::kBlocked) st.push_back(b * c_stride);
  st.insert(st.end(), y.size() - 2, 0);
  st.push_back(c_stride);
  return st;
}

std::vector<int64_t> DenseStrides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> st(dims.size(), 1);
  for (int64_t d = static_cast<int64_t>(dims.size()) - 2; d >= 0; --d)
    st[d] = st[d + 1] * dims[d + 1];
  return st;
}

// The per-channel operands of a layout program are constant over the spatial dims, so those
// dims and the innermost (the channels, or a block of them) merge into one row that each
// per-channel operand repeats with the innermost size as its period: rows of a 16-channel
// block (or of a few channels, channels-last) otherwise cost a dispatch and an odometer step
// each. Returns the iteration dims and rewrites the operands' strides; unchanged when a row
// would stay shorter than a tile.
std::vector<int64_t> MergeSpatialIntoRows(const std::vector<int64_t>& dims, ChannelLayout layout,
                                          std::vector<Operand>& in) {
  const size_t first = layout == ChannelLayout::kBlocked ? 2 : 1;  // of the spatial dims
  const int64_t inner = dims.back();
  int64_t spatial = 1;
  for (size_t d = first; d + 1 < dims.size(); ++d) spatial *= dims[d];
  if (spatial == 1 || spatial * inner < kTile) return dims;
  std::vector<int64_t> merged(dims.begin(), dims.begin() + first);
  merged.push_back(spatial * inner);
  for (Operand& o : in) {
    if (o.dense) {
      o.strides = DenseStrides(merged);
      continue;
    }
    std::vector<int64_t> st(o.strides.begin(), o.strides.begin() + first);
    st.push_back(o.strides.back());
    o.strides = std::move(st);
    o.period = inner;
  }
  return merged;
}

}  // namespace

// The element-wise work in the layout a convolution left its activation in (channels-last
// or whole channel blocks): DenseNet's pre-activation BatchNorm+ReLU and the like no longer
// reorder to plain and back. Every operand is either the activation's shape (read in that
// layout) or per-channel/scalar; the output is written in the layout too. nullptr otherwise.
std::unique_ptr<CpuKernel> MakeLayoutElementwise(BuildContext& ctx, const Node& node,
                                                 const std::vector<Instr>& prog, int out) {
  const std::vector<int64_t> y = ctx.slots[out].shape;
  if (!ctx.slots[out].blocked_ok || y.size() < 3 || y.size() > 5) return nullptr;
  int block = 0;
  ChannelLayout layout = ChannelLayout::kOther;
  for (const Value* v : node.inputs) {
    const int s = ctx.SlotOf(v);
    if (s < 0 || !v || ctx.slots[s].dtype != DType::kFloat32) return nullptr;
    if (layout == ChannelLayout::kOther && ctx.slots[s].shape == y) {
      layout = StoredChannelLayout(ctx, s, &block);
    }
  }
  if (layout == ChannelLayout::kOther) return nullptr;
  const std::vector<int64_t> dims = MemoryOrderDims(y, layout, block);
  std::vector<Operand> in;
  for (const Value* v : node.inputs) {
    const int s = ctx.SlotOf(v);
    const std::vector<int64_t> shape = ctx.slots[s].shape;
    if (shape == y) {
      in.push_back({ctx.ReadAs(s, ChannelLayoutDesc(y, layout, block)), DenseStrides(dims), true});
      continue;
    }
    std::optional<std::vector<int64_t>> pc = PerChannel(shape, y);
    if (!pc) return nullptr;
    const int plain = ctx.slots[s].is_plain() ? s : ctx.ReadAs(s, ctx.PlainMd(s));
    in.push_back({plain, PerChannelStrides(*pc, y, layout, block), false});
  }
  const int y_slot = ctx.WriteAs(out, ChannelLayoutDesc(y, layout, block));
  std::vector<int64_t> iter = MergeSpatialIntoRows(dims, layout, in);
  return NewElementwiseKernel(std::move(in), prog, y_slot, std::move(iter), DType::kFloat32, {},
                              /*record_bound=*/true);
}

namespace {

// A QDQ program over 8-bit activations that int8 convolutions left channels-last: every
// input it reads is the output's shape and every other one a scalar, so with all of them
// stored in one unpadded layout the work is the same on the flat buffers. Reading them in
// that layout (and writing the output so) spares a reorder to plain and back around every
// quantized Add of a residual network.
bool QuantizedProgram(const std::vector<Instr>& prog) {
  for (const Instr& i : prog) {
    if (i.op == Op::kQuantize || i.op == Op::kDequantize) return true;
  }
  return false;
}

// The strides of an unblocked, unpadded desc; nullopt otherwise.
std::optional<dnnl::memory::dims> UnpaddedStrides(const dnnl::memory::desc& md) {
  const dnnl_memory_desc_t& d = md.data;
  if (d.format_kind != dnnl_blocked || d.format_desc.blocking.inner_nblks != 0 || d.offset0 != 0) {
    return std::nullopt;
  }
  for (int i = 0; i < d.ndims; ++i) {
    if (d.padded_dims[i] != d.dims[i]) return std::nullopt;
  }
  return dnnl::memory::dims(d.format_desc.blocking.strides,
                            d.format_desc.blocking.strides + d.ndims);
}

// The layout (strides) of the first full-shape input stored unplain; nullopt when none is.
std::optional<dnnl::memory::dims> SharedLayout(const BuildContext& ctx, const Node& node,
                                               const std::vector<int64_t>& y) {
  for (const Value* v : node.inputs) {
    const int s = ctx.SlotOf(v);
    if (s >= 0 && ctx.slots[s].shape == y && !ctx.slots[s].is_plain()) {
      return UnpaddedStrides(ctx.slots[s].md);
    }
  }
  return std::nullopt;
}

}  // namespace

std::unique_ptr<CpuKernel> MakeSameLayoutQuantized(BuildContext& ctx, const Node& node,
                                                   const std::vector<Instr>& prog, int out,
                                                   DType out_dtype) {
  const std::vector<int64_t> y = ctx.slots[out].shape;
  if (!QuantizedProgram(prog) || !ctx.slots[out].blocked_ok || y.size() < 3 || y.size() > 5) {
    return nullptr;
  }
  std::optional<dnnl::memory::dims> strides = SharedLayout(ctx, node, y);
  if (!strides) return nullptr;
  const int64_t n = NumElements(y);
  auto md_of = [&](int slot) {
    return dnnl::memory::desc(ToDims(y), ctx.PlainMd(slot).data_type(), *strides);
  };
  std::vector<Operand> in;
  for (size_t k = 0; k < node.inputs.size(); ++k) {
    const int s = ctx.SlotOf(node.inputs[k]);
    if (s < 0) return nullptr;
    const bool full = ctx.slots[s].shape == y, used = ReadsOperand(prog, static_cast<int>(k));
    if (!used || (!full && NumElements(ctx.slots[s].shape) == 1)) {
      Operand o{s, {0}, false, nullptr};
      o.used = used;
      if (used && ctx.slots[s].dtype != DType::kFloat32) return nullptr;
      in.push_back(std::move(o));
      continue;
    }
    const DType dt = ctx.slots[s].dtype;
    const CastFn to_float = dt == DType::kFloat32 ? nullptr : CastFor(dt, DType::kFloat32);
    if (!full ||
        (dt != DType::kFloat32 && (!to_float || !OnlyConvertingReads(prog, static_cast<int>(k))))) {
      return nullptr;
    }
    Operand o{ctx.ReadAs(s, md_of(s)), {1}, true, to_float};
    o.dtype = dt;
    in.push_back(std::move(o));
  }
  const int y_slot = ctx.WriteAs(out, md_of(out));
  return NewElementwiseKernel(std::move(in), prog, y_slot, std::vector<int64_t>{n}, out_dtype);
}

namespace {

// Whether input i of a QDQ program may be read in a convolution's unpadded layout (see
// MakeSameLayoutQuantized): it is the output's shape, 8-bit or float32, and every other
// input the program reads is that shape too or a scalar.
bool QuantizedLayoutInput(const Node& node, const std::vector<Instr>& prog, size_t i) {
  const Value* out = node.output(0);
  if (!QuantizedProgram(prog) || !out || !out->shape || !IsStatic(*out->shape)) return false;
  const std::vector<int64_t> y = StaticDims(*out->shape);
  if (y.size() < 3 || y.size() > 5 || i >= node.inputs.size()) return false;
  for (size_t k = 0; k < node.inputs.size(); ++k) {
    const Value* v = node.inputs[k];
    if (!v || !v->shape || !IsStatic(*v->shape)) return false;
    const std::vector<int64_t> s = StaticDims(*v->shape);
    if (ReadsOperand(prog, static_cast<int>(k)) && s != y && NumElements(s) != 1) return false;
  }
  return StaticDims(*node.inputs[i]->shape) == y;
}

}  // namespace

bool LayoutElementwiseInput(const Node& node, size_t i) {
  // A program over a concatenation reads each piece in channel blocks (elementwise_concat.cc).
  if (const int64_t k = kiln_ops::ConcatInputs(node); k != 0) {
    return static_cast<int64_t>(i) < k && FloatValue(node.inputs[i]) && FloatValue(node.output(0));
  }
  std::optional<std::vector<Instr>> prog = ReadInstrs(node);
  if (prog && QuantizedLayoutInput(node, *prog, i)) return true;
  if (!prog || !node.output(0) || !FloatValue(node.output(0))) return false;
  const std::vector<int64_t> y = StaticDims(*node.output(0)->shape);
  if (y.size() < 3 || y.size() > 5 || i >= node.inputs.size()) return false;
  for (const Value* v : node.inputs) {
    if (!FloatValue(v)) return false;
    const std::vector<int64_t> s = StaticDims(*v->shape);
    if (s != y && !PerChannel(s, y)) return false;
  }
  return StaticDims(*node.inputs[i]->shape) == y;
}

}  // namespace kiln::cpu

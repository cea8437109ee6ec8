// Concat along one axis, any dtype: for each outer block, each input contributes one
// contiguous run of (its axis extent x inner) elements.
#include <cstring>

#include "runtime/cpu/build_context.h"

#include "runtime/cpu/own_kernels.h"

namespace kiln::cpu {
namespace {

class ConcatKernel : public CpuKernel {
 public:
  ConcatKernel(std::vector<int> in, std::vector<size_t> run, int out, int64_t outer)
      : in_(std::move(in)), run_(std::move(run)), out_(out), outer_(outer) {}

  absl::Status Run(const ExecContext& ctx) override {
    char* y = static_cast<char*>(ctx.ptrs[out_]);
    for (int64_t o = 0; o < outer_; ++o) {
      for (size_t k = 0; k < in_.size(); ++k) {
        if (run_[k] == 0) continue;
        std::memcpy(y, static_cast<const char*>(ctx.ptrs[in_[k]]) + o * run_[k], run_[k]);
        y += run_[k];
      }
    }
    return absl::OkStatus();
  }

 private:
  std::vector<int> in_;
  std::vector<size_t> run_;  // bytes per outer block, per input
  int out_;
  int64_t outer_;
};

// Concat along the channels of activations that convolutions left channels-last or in
// channel blocks, in that layout: no reorder to plain and back around it (SqueezeNet's fire
// modules, GoogLeNet's and DenseNet's concatenations). Channels-last: each pixel's channels
// of input k land at channel offset k in the output pixel. Blocked (every input's channels a
// whole number of blocks): each input's blocks for one image are one contiguous run.
class LayoutConcatKernel : public CpuKernel {
 public:
  absl::Status Run(const ExecContext& ctx) override {
    char* y = static_cast<char*>(ctx.ptrs[out]);
    ForEachIndex(groups, groups * out_run >= kParallelElements * 4, [&](int64_t g) {
      char* dst = y + g * out_run;
      for (size_t k = 0; k < in.size(); ++k) {
        std::memcpy(dst, static_cast<const char*>(ctx.ptrs[in[k]]) + g * run[k], run[k]);
        dst += run[k];
      }
    });
    return absl::OkStatus();
  }

  std::vector<int> in;
  std::vector<size_t> run;  // bytes per group, per input
  size_t out_run = 0;
  int out = -1;
  int64_t groups = 0;  // pixels (channels-last) or images (blocked)
};

enum class ChannelLayout { kOther, kLast, kBlocked };

// Whether two f32 descs place every element at the same offset (oneDNN's operator== also
// compares fields that do not change the placement, which differ between a primitive's desc
// and one made from a tag).
bool SamePlacement(const dnnl::memory::desc& a, const dnnl::memory::desc& b) {
  const dnnl_memory_desc_t &x = a.data, &y = b.data;
  if (x.ndims != y.ndims || x.format_kind != y.format_kind || x.format_kind != dnnl_blocked ||
      x.offset0 != y.offset0 || x.data_type != y.data_type) {
    return false;
  }
  const auto& bx = x.format_desc.blocking;
  const auto& by = y.format_desc.blocking;
  if (bx.inner_nblks != by.inner_nblks) return false;
  for (int i = 0; i < bx.inner_nblks; ++i) {
    if (bx.inner_blks[i] != by.inner_blks[i] || bx.inner_idxs[i] != by.inner_idxs[i]) return false;
  }
  for (int i = 0; i < x.ndims; ++i) {
    if (x.dims[i] != y.dims[i] || x.padded_dims[i] != y.padded_dims[i] ||
        bx.strides[i] != by.strides[i]) {
      return false;
    }
  }
  return true;
}

// How `md` (dims `dims`, rank 3..5) lays out channels: channels-last, blocks of `block`, or
// neither.
ChannelLayout LayoutOf(const dnnl::memory::desc& md, const dnnl::memory::dims& dims, int block) {
  using tag = dnnl::memory::format_tag;
  const size_t r = dims.size();
  const tag last[] = {tag::nwc, tag::nhwc, tag::ndhwc};
  const tag b8[] = {tag::nCw8c, tag::nChw8c, tag::nCdhw8c};
  const tag b16[] = {tag::nCw16c, tag::nChw16c, tag::nCdhw16c};
  const auto f32 = dnnl::memory::data_type::f32;
  if (SamePlacement(md, dnnl::memory::desc(dims, f32, last[r - 3]))) return ChannelLayout::kLast;
  const tag blocked = block == 16 ? b16[r - 3] : b8[r - 3];
  if (dims[1] % block == 0 && SamePlacement(md, dnnl::memory::desc(dims, f32, blocked))) {
    return ChannelLayout::kBlocked;
  }
  return ChannelLayout::kOther;
}

dnnl::memory::desc LayoutDesc(const std::vector<int64_t>& shape, ChannelLayout layout, int block) {
  using tag = dnnl::memory::format_tag;
  const size_t r = shape.size();
  const tag last[] = {tag::nwc, tag::nhwc, tag::ndhwc};
  const tag b8[] = {tag::nCw8c, tag::nChw8c, tag::nCdhw8c};
  const tag b16[] = {tag::nCw16c, tag::nChw16c, tag::nCdhw16c};
  const tag t = layout == ChannelLayout::kLast ? last[r - 3] : block == 16 ? b16[r - 3] : b8[r - 3];
  return dnnl::memory::desc(ToDims(shape), dnnl::memory::data_type::f32, t);
}

// The layout of the first input a convolution left channels-last or blocked (blocks only
// when every input's channels are whole blocks); kOther when there is none.
ChannelLayout ChooseLayout(const BuildContext& ctx, const Node& node, int* block) {
  for (const Value* v : node.inputs) {
    const int s = ctx.SlotOf(v);
    if (s < 0 || ctx.slots[s].is_plain()) continue;
    for (int b : {16, 8}) {
      const ChannelLayout l = LayoutOf(ctx.StoredMd(s), ToDims(ctx.slots[s].shape), b);
      if (l == ChannelLayout::kOther) continue;
      bool whole = true;
      for (const Value* u : node.inputs) {
        const int t = ctx.SlotOf(u);
        whole = whole && t >= 0 && ctx.slots[t].shape.size() == ctx.slots[s].shape.size() &&
                (l == ChannelLayout::kLast || ctx.slots[t].shape[1] % b == 0);
      }
      if (!whole) continue;
      *block = b;
      return l;
    }
  }
  return ChannelLayout::kOther;
}

// The layout concat, in the layout of an input a convolution left channels-last or in whole
// channel blocks (other inputs are reordered to it); nullptr when no input is so laid out
// or the output must be plain.
std::unique_ptr<CpuKernel> MakeLayoutConcat(BuildContext& ctx, const Node& node, int out,
                                            int64_t axis) {
  const Slot& y = ctx.slots[out];
  if (axis != 1 || y.dtype != DType::kFloat32 || y.shape.size() < 3 || y.shape.size() > 5 ||
      !y.blocked_ok) {
    return nullptr;
  }
  for (const Value* v : node.inputs) {
    const int s = ctx.SlotOf(v);
    if (s < 0 || ctx.slots[s].dtype != DType::kFloat32) return nullptr;
  }
  int block = 0;
  const ChannelLayout layout = ChooseLayout(ctx, node, &block);
  if (layout == ChannelLayout::kOther) return nullptr;
  const std::vector<int64_t> y_shape = y.shape;
  auto k = std::make_unique<LayoutConcatKernel>();
  int64_t spatial = 1;
  for (size_t d = 2; d < y_shape.size(); ++d) spatial *= y_shape[d];
  const int64_t per_channel = layout == ChannelLayout::kLast ? 1 : spatial;
  for (const Value* v : node.inputs) {
    const int s = ctx.SlotOf(v);
    const std::vector<int64_t> shape = ctx.slots[s].shape;
    k->in.push_back(ctx.ReadAs(s, LayoutDesc(shape, layout, block)));
    k->run.push_back(shape[1] * per_channel * sizeof(float));
  }
  k->groups = layout == ChannelLayout::kLast ? y_shape[0] * spatial : y_shape[0];
  k->out_run = y_shape[1] * per_channel * sizeof(float);
  k->out = ctx.WriteAs(out, LayoutDesc(y_shape, layout, block));
  return k;
}

}  // namespace

std::unique_ptr<CpuKernel> MakeConcatKernel(BuildContext& ctx, const Node& node) {
  if (!node.domain.empty() || node.op_type != "Concat" || node.inputs.empty()) return nullptr;
  const int out = ctx.SlotOf(node.output(0));
  if (out < 0) return nullptr;
  const std::vector<int64_t>& ys = ctx.slots[out].shape;
  const size_t elem = DTypeSize(ctx.slots[out].dtype);
  const int64_t rank = static_cast<int64_t>(ys.size());
  int64_t axis = node.GetInt("axis", 0);
  if (axis < 0) axis += rank;
  if (elem == 0 || axis < 0 || axis >= rank) return nullptr;
  if (auto k = MakeLayoutConcat(ctx, node, out, axis)) return k;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < rank; ++d) {
    if (d < axis) outer *= ys[d];
    if (d > axis) inner *= ys[d];
  }
  std::vector<int> in;
  std::vector<size_t> run;
  int64_t extent = 0;
  for (const Value* v : node.inputs) {
    const int s = ctx.SlotOf(v);
    if (s < 0 || ctx.slots[s].dtype != ctx.slots[out].dtype ||
        static_cast<int64_t>(ctx.slots[s].shape.size()) != rank) {
      return nullptr;
    }
    const int64_t a = ctx.slots[s].shape[axis];
    extent += a;
    // An input a convolution left in its own layout is read through a reorder to plain.
    in.push_back(ctx.slots[s].is_plain() ? s : ctx.ReadAs(s, ctx.PlainMd(s)));
    run.push_back(static_cast<size_t>(a * inner) * elem);
  }
  if (extent != ys[axis]) return nullptr;
  return std::make_unique<ConcatKernel>(std::move(in), std::move(run), out, outer);
}

}  // namespace kiln::cpu

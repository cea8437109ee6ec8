// Concat along one axis, any dtype: for each outer block, each input contributes one
// contiguous run of (its axis extent x inner) elements.
#include <algorithm>
#include <cstring>

#include "runtime/cpu/build_context.h"
#include "runtime/cpu/nonfinite_guard.h"
#include "runtime/cpu/own_kernels.h"

namespace kiln::cpu {
namespace {

class ConcatKernel : public CpuKernel {
 public:
  bool follows_team() const override { return true; }
  ConcatKernel(std::vector<int> in, std::vector<size_t> run, int out, int64_t outer,
               bool first_in_place)
      : in_(std::move(in)),
        run_(std::move(run)),
        out_(out),
        outer_(outer),
        first_in_place_(first_in_place) {
    for (size_t r : run_) block_ += r;
  }

  absl::Status Run(const ExecContext& ctx) override {
    char* y = static_cast<char*>(ctx.ptrs[out_]);
    // In place (Engine::RunAppending), the first input's runs are already in each block.
    const size_t first = ctx.append_in_place && first_in_place_ ? 1 : 0;
    const int64_t bytes = outer_ * static_cast<int64_t>(block_);
    ForEachIndex(outer_, bytes >= kParallelElements * 16, [&](int64_t o) {
      char* dst = y + o * static_cast<int64_t>(block_);
      for (size_t k = 0; k < in_.size(); ++k) {
        if (k >= first && run_[k] > 0) {
          std::memcpy(dst, static_cast<const char*>(ctx.ptrs[in_[k]]) + o * run_[k], run_[k]);
        }
        dst += run_[k];
      }
    });
    if (ctx.bounds) ctx.bounds->SetMaxOf(in_, out_);  // guarded readers need not scan it
    return absl::OkStatus();
  }

 private:
  std::vector<int> in_;
  std::vector<size_t> run_;  // bytes per outer block, per input
  int out_;
  int64_t outer_;
  bool first_in_place_;  // the first input may be in place already (BuildContext::appends)
  size_t block_ = 0;     // bytes per outer block of the output
};

// Concat along the channels of activations that convolutions left channels-last or in
// channel blocks, in that layout: no reorder to plain and back around it (SqueezeNet's fire
// modules, GoogLeNet's and DenseNet's concatenations). Channels-last: each pixel's channels
// of input k land at channel offset k in the output pixel. Blocked (every input's channels a
// whole number of blocks): each input's blocks for one image are one contiguous run.
class LayoutConcatKernel : public CpuKernel {
 public:
  bool follows_team() const override { return true; }
  absl::Status Run(const ExecContext& ctx) override {
    char* y = static_cast<char*>(ctx.ptrs[out]);
    ForEachIndex(groups, groups * out_run >= kParallelElements * 4, [&](int64_t g) {
      char* dst = y + g * out_run;
      for (size_t k = 0; k < in.size(); ++k) {
        std::memcpy(dst, static_cast<const char*>(ctx.ptrs[in[k]]) + g * run[k], run[k]);
        dst += run[k];
      }
    });
    if (ctx.bounds) ctx.bounds->SetMaxOf(in, out);
    return absl::OkStatus();
  }

  std::vector<int> in;
  std::vector<size_t> run;  // bytes per group, per input
  size_t out_run = 0;
  int out = -1;
  int64_t groups = 0;  // pixels (channels-last) or images (blocked)
};

// The layout of the first input a convolution left channels-last or blocked (blocks only
// when every input's channels are whole blocks); kOther when there is none.
ChannelLayout ChooseLayout(const BuildContext& ctx, const Node& node, int* block) {
  for (const Value* v : node.inputs) {
    const int s = ctx.SlotOf(v);
    if (s < 0 || ctx.slots[s].is_plain()) continue;
    for (int b : {16, 8}) {
      const ChannelLayout l = ChannelLayoutOf(ctx.StoredMd(s), ToDims(ctx.slots[s].shape), b);
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
    k->in.push_back(ctx.ReadAs(s, ChannelLayoutDesc(shape, layout, block)));
    k->run.push_back(shape[1] * per_channel * sizeof(float));
  }
  k->groups = layout == ChannelLayout::kLast ? y_shape[0] * spatial : y_shape[0];
  k->out_run = y_shape[1] * per_channel * sizeof(float);
  k->out = ctx.WriteAs(out, ChannelLayoutDesc(y_shape, layout, block));
  return k;
}

}  // namespace

std::unique_ptr<CpuKernel> NewGroupConcat(std::vector<int> in, std::vector<size_t> run, int out,
                                          int64_t groups) {
  auto k = std::make_unique<LayoutConcatKernel>();
  k->in = std::move(in);
  k->run = std::move(run);
  for (size_t r : k->run) k->out_run += r;
  k->out = out;
  k->groups = groups;
  return k;
}

std::unique_ptr<CpuKernel> MakeConcatKernel(BuildContext& ctx, const Node& node) {
  if (!node.domain.empty() || node.op_type != "Concat" || node.inputs.empty()) return nullptr;
  const int out = ctx.SlotOf(node.output(0));
  if (out < 0) return nullptr;
  // A copy: reading an input through a reorder adds slots (and may move the table).
  const std::vector<int64_t> ys = ctx.slots[out].shape;
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
  // The first input read by this node alone, straight from the caller's tensor, into the
  // caller's output: a caller may place it there itself (Engine::RunAppending).
  const int first = ctx.SlotOf(node.inputs[0]);
  const bool in_place =
      in[0] == first && ctx.slots[first].storage == Storage::kInput &&
      ctx.slots[out].storage == Storage::kOutput && ctx.slots[out].is_plain() &&
      std::count(ctx.sole_read_inputs.begin(), ctx.sole_read_inputs.end(), first) == 1;
  if (in_place) ctx.appends.push_back({first, out});
  return std::make_unique<ConcatKernel>(std::move(in), std::move(run), out, outer, in_place);
}

}  // namespace kiln::cpu

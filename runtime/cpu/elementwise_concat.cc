// FusedElementwise programs over a concatenation (`concat_inputs`, kiln_ops.h; written by
// fuse_concat_elementwise): one element-wise kernel per piece, each reading its piece where
// the producer left it and writing the output's channel slice [c0, c0 + ck) of every image.
// The concatenation itself is never written. In channel blocks (every piece a whole number
// of blocks) a piece's slice of one image is one contiguous run; otherwise the pieces are read
// plain and each image's slice is ck rows of the spatial size.
#include "ir/kiln_ops.h"
#include "runtime/cpu/elementwise_kernel.h"
#include "runtime/cpu/nonfinite_guard.h"

namespace kiln::cpu {
namespace {

// The pieces run in one parallel region, each thread taking its share of every piece: a
// DenseNet layer late in a block reads up to 24 pieces of [8, 32, 14, 14], each below the
// size at which a kernel opens a region of its own, so one by one they ran on one thread.
class PiecesKernel : public CpuKernel {
 public:
  bool follows_team() const override { return true; }
  absl::Status Run(const ExecContext& ctx) override {
    if (join) RETURN_IF_ERROR(join->Run(ctx));
    int64_t work = 0;
    int64_t team = omp_get_max_threads();
    for (const auto& p : pieces) {
      work += p->Work();
      team = std::min<int64_t>(team, p->Shares());
    }
    const int threads = static_cast<int>(team);
    if (work < kParallelElements || threads < 2) {
      for (const auto& p : pieces) p->RunShare(ctx, 0, 1);
    } else {
#pragma omp parallel num_threads(threads)
      {
        const int t = omp_get_thread_num(), parts = omp_get_num_threads();
        for (const auto& p : pieces) p->RunShare(ctx, t, parts);
      }
    }
    float bound = 0.f;  // the output's: the largest piece's (each writes its own channels)
    for (const auto& p : pieces) bound = std::max(bound, p->OutputBound(ctx));
    if (ctx.bounds && bound <= kSafeBound) ctx.bounds->Set(out, bound);
    return absl::OkStatus();
  }
  int out = -1;                     // the slot the pieces write
  std::unique_ptr<CpuKernel> join;  // channels-last pieces joined first (JoinChannelsLast)
  std::vector<std::unique_ptr<SharedKernel>> pieces;
};

// How the pieces are read: in the channel blocks (or channels-last) of the first piece a
// convolution left so (the others are reordered to it, as the layout concat does; blocks
// only when every piece's channels are whole blocks), else plain.
struct PieceLayout {
  ChannelLayout layout = ChannelLayout::kOther;
  int block = 0;
};

PieceLayout ChoosePieceLayout(const BuildContext& ctx, const std::vector<int>& pieces, int out) {
  if (!ctx.slots[out].blocked_ok) return {};
  for (int s : pieces) {
    int b = 0;
    const ChannelLayout l = StoredChannelLayout(ctx, s, &b);
    if (l == ChannelLayout::kOther) continue;
    for (int t : pieces) {
      if (l == ChannelLayout::kBlocked && ctx.slots[t].shape[1] % b != 0) return {};
    }
    return {l, b};
  }
  return {};
}

// A piece of ck channels in memory order: [N, ck / b, spatial * b] in blocks, [N, spatial,
// ck] channels-last, [N, ck, spatial] plain; the piece's strides there (it is contiguous)
// and the output's (the piece's channels at c0 of C).
struct PieceDims {
  std::vector<int64_t> dims, piece, out;
  int64_t out_base = 0;
};

PieceDims DimsOf(const PieceLayout& p, int64_t n, int64_t c, int64_t spatial, int64_t c0,
                 int64_t ck) {
  switch (p.layout) {
    case ChannelLayout::kBlocked:
      return {{n, ck / p.block, spatial * p.block},
              {ck * spatial, spatial * p.block, 1},
              {c * spatial, spatial * p.block, 1},
              c0 * spatial};
    case ChannelLayout::kLast:
      return {{n, spatial, ck}, {spatial * ck, ck, 1}, {spatial * c, c, 1}, c0};
    default:
      return {
          {n, ck, spatial}, {ck * spatial, spatial, 1}, {c * spatial, spatial, 1}, c0 * spatial};
  }
}

// An operand of shape `s` (per-channel, per-image or scalar against y, checked by the pass
// and again here) over one piece at channel c0: its strides in the piece's iteration dims.
std::optional<Operand> SliceOperand(int slot, const std::vector<int64_t>& shape,
                                    const std::vector<int64_t>& y, int64_t c0,
                                    const PieceLayout& p) {
  const std::optional<std::vector<int64_t>> pc = PerChannel(shape, y);
  if (!pc) return std::nullopt;
  const std::vector<int64_t>& s = *pc;
  const int64_t c = s[1] == 1 ? 0 : 1, n = s[0] == 1 ? 0 : s[1];
  Operand o{slot, {}, false};
  o.base = c0 * c;
  if (p.layout == ChannelLayout::kBlocked) {  // the channel repeats with period b along a row
    o.strides = {n, p.block * c, c};
    o.period = p.block;
  } else if (p.layout == ChannelLayout::kLast) {
    o.strides = {n, 0, c};
  } else {
    o.strides = {n, c, 0};
  }
  return o;
}

// Each piece readable in the layout: (slot read, channels) per piece.
std::vector<std::pair<int, int64_t>> ReadPieces(BuildContext& ctx, const std::vector<int>& pieces,
                                                const PieceLayout& pl) {
  std::vector<std::pair<int, int64_t>> reads;
  for (int s : pieces) {
    const std::vector<int64_t> shape = ctx.slots[s].shape;  // ReadAs may move the table
    const int r = pl.layout != ChannelLayout::kOther
                      ? ctx.ReadAs(s, ChannelLayoutDesc(shape, pl.layout, pl.block))
                      : (ctx.slots[s].is_plain() ? s : ctx.ReadAs(s, ctx.PlainMd(s)));
    reads.push_back({r, shape[1]});
  }
  return reads;
}

// The kernel joining channels-last pieces into a temp of the step, which `reads` becomes.
std::unique_ptr<CpuKernel> JoinChannelsLast(BuildContext& ctx,
                                            std::vector<std::pair<int, int64_t>>& reads,
                                            const std::vector<int64_t>& y, int64_t spatial) {
  // Pixel by pixel, each piece's few channels: too short a row to run the program on.
  std::vector<int> in;
  std::vector<size_t> run;
  for (const auto& [slot, ck] : reads) {
    in.push_back(slot);
    run.push_back(static_cast<size_t>(ck) * sizeof(float));
  }
  const int out = ctx.AddTemp(ChannelLayoutDesc(y, ChannelLayout::kLast, 0));
  reads = {{out, y[1]}};
  return NewGroupConcat(std::move(in), std::move(run), out, y[0] * spatial);
}

}  // namespace

std::unique_ptr<CpuKernel> MakeConcatProgram(BuildContext& ctx, const Node& node) {
  const int64_t k = kiln_ops::ConcatInputs(node);
  std::optional<std::vector<ew::Instr>> prog = ReadInstrs(node);
  const int out = ctx.SlotOf(node.output(0));
  if (k < 2 || !prog || prog->empty() || out < 0 || ctx.slots[out].dtype != DType::kFloat32) {
    return nullptr;
  }
  const std::vector<int64_t> y = ctx.slots[out].shape;
  if (y.size() < 3 || y.size() > 5) return nullptr;
  std::vector<int> pieces;
  for (int64_t i = 0; i < k; ++i) {
    const int s = ctx.SlotOf(node.inputs[i]);
    if (s < 0 || ctx.slots[s].dtype != DType::kFloat32 || ctx.slots[s].shape.size() != y.size()) {
      return nullptr;
    }
    pieces.push_back(s);
  }
  const PieceLayout pl = ChoosePieceLayout(ctx, pieces, out);
  int64_t spatial = 1;
  for (size_t d = 2; d < y.size(); ++d) spatial *= y[d];
  auto k_out = std::make_unique<PiecesKernel>();
  std::vector<std::pair<int, int64_t>> reads = ReadPieces(ctx, pieces, pl);
  // The program's iteration: over the channels-last join, rows of whole images with the
  // channels as the per-channel operands' period, like C channels in one block.
  PieceLayout walk = pl;
  if (pl.layout == ChannelLayout::kLast) {
    walk = {ChannelLayout::kBlocked, static_cast<int>(y[1])};
    k_out->join = JoinChannelsLast(ctx, reads, y, spatial);
  }
  int64_t c0 = 0;
  std::vector<int> others;
  for (size_t i = static_cast<size_t>(k); i < node.inputs.size(); ++i) {
    const int s = ctx.SlotOf(node.inputs[i]);
    if (s < 0 || ctx.slots[s].dtype != DType::kFloat32) return nullptr;
    others.push_back(ctx.slots[s].is_plain() ? s : ctx.ReadAs(s, ctx.PlainMd(s)));
  }
  const int y_slot = pl.layout != ChannelLayout::kOther
                         ? ctx.WriteAs(out, ChannelLayoutDesc(y, pl.layout, pl.block))
                         : ctx.WriteAs(out, ctx.PlainMd(out));
  k_out->out = y_slot;
  for (const auto& [r, ck] : reads) {
    PieceDims d = DimsOf(walk, y[0], y[1], spatial, c0, ck);
    std::vector<Operand> in;
    in.push_back({r, d.piece, false});
    for (size_t j = 0; j < others.size(); ++j) {
      std::optional<Operand> o = SliceOperand(others[j], ctx.slots[others[j]].shape, y, c0, walk);
      if (!o) return nullptr;
      o->used = ReadsOperand(*prog, static_cast<int>(j + 1));
      in.push_back(std::move(*o));
    }
    k_out->pieces.push_back(NewElementwiseKernel(std::move(in), *prog, y_slot, std::move(d.dims),
                                                 DType::kFloat32, {d.out, d.out_base},
                                                 ctx.slots[out].blocked_ok));
    c0 += ck;
  }
  return k_out;
}

}  // namespace kiln::cpu

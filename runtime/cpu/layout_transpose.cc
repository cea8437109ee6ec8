// Transposes that relabel a convolution layout (layout_transpose.h).
#include "runtime/cpu/layout_transpose.h"

#include <algorithm>
#include <optional>
#include <unordered_map>
#include <vector>

namespace kiln::cpu {
namespace {

using dnnl::memory;

// The Transpose's perm when it is a float32 Transpose of rank 3..5 with an explicit perm.
std::optional<std::vector<int64_t>> LayoutPerm(const Node& node) {
  if (!node.domain.empty() || node.op_type != "Transpose" || !node.input(0) || !node.output(0)) {
    return std::nullopt;
  }
  const Value* x = node.input(0);
  if (x->dtype != DType::kFloat32 || !x->shape) return std::nullopt;
  const std::vector<int64_t> perm = node.GetInts("perm");
  const size_t rank = x->shape->size();
  if (rank < 3 || rank > 5 || perm.size() != rank) return std::nullopt;
  return perm;
}

bool IsChannelsFirstTranspose(const Node& node) {
  std::optional<std::vector<int64_t>> perm = LayoutPerm(node);
  return perm && *perm == ChannelsFirstPerm(perm->size());
}

// `md` (of the Transpose output's dims) seen with the input's dims: input axis perm[j] is
// output axis j, so output axis j moves to index perm[j].
memory::desc AsInputDims(const memory::desc& md, const std::vector<int64_t>& perm) {
  return md.permute_axes(std::vector<int>(perm.begin(), perm.end()));
}

class NoKernel : public CpuKernel {
 public:
  bool follows_team() const override { return true; }
  absl::Status Run(const ExecContext&) override { return absl::OkStatus(); }
};

// How many node inputs read `slot`, and at which step each planned value is produced.
struct Uses {
  std::vector<int> readers;
  std::vector<int64_t> producer;
};

Uses CountUses(const Graph& graph, const BuildContext& ctx) {
  Uses u{std::vector<int>(ctx.slots.size(), 0), std::vector<int64_t>(ctx.slots.size(), -1)};
  const auto& nodes = graph.nodes();
  for (size_t step = 0; step < nodes.size(); ++step) {
    for (const Value* v : nodes[step]->inputs) {
      const int s = ctx.SlotOf(v);
      if (s >= 0) ++u.readers[s];
    }
    for (const Value* v : nodes[step]->outputs) {
      const int s = ctx.SlotOf(v);
      if (s >= 0 && u.producer[s] < 0) u.producer[s] = static_cast<int64_t>(step);
    }
  }
  return u;
}

}  // namespace

std::vector<int64_t> ChannelsLastPerm(size_t rank) {
  std::vector<int64_t> p = {0};
  for (size_t d = 2; d < rank; ++d) p.push_back(static_cast<int64_t>(d));
  p.push_back(1);
  return p;
}

std::vector<int64_t> ChannelsFirstPerm(size_t rank) {
  std::vector<int64_t> p = {0, static_cast<int64_t>(rank) - 1};
  for (size_t d = 1; d + 1 < rank; ++d) p.push_back(static_cast<int64_t>(d));
  return p;
}

bool IsChannelsLastTranspose(const Node& node) {
  std::optional<std::vector<int64_t>> perm = LayoutPerm(node);
  return perm && *perm == ChannelsLastPerm(perm->size());
}

void PlanLayoutTransposes(const Graph& graph, BuildContext& ctx) {
  const Uses uses = CountUses(graph, ctx);
  const auto& nodes = graph.nodes();
  for (size_t step = 0; step < nodes.size(); ++step) {
    const Node& n = *nodes[step];
    if (!IsChannelsFirstTranspose(n)) continue;
    const int xs = ctx.SlotOf(n.input(0)), ys = ctx.SlotOf(n.output(0));
    if (xs < 0 || ys < 0 || xs == ys) continue;
    Slot& x = ctx.slots[xs];
    Slot& y = ctx.slots[ys];
    // The input's buffer becomes the output's: nothing else may read it, and both must be
    // planned intermediates (a caller's tensor or a constant cannot move).
    if (x.storage != Storage::kArena || y.storage != Storage::kArena || !y.blocked_ok ||
        uses.readers[xs] != 1 || uses.producer[xs] < 0 || y.dtype != DType::kFloat32) {
      continue;
    }
    const memory::desc md = ChannelLayoutDesc(y.shape, ChannelLayout::kLast, 0);
    const int request = static_cast<int>(ctx.requests.size());
    ctx.requests.push_back({static_cast<int64_t>(md.get_size()), uses.producer[xs],
                            std::max<int64_t>(static_cast<int64_t>(step), y.last_step)});
    x.storage = Storage::kBlocked;  // plain bytes, in the blocked arena
    x.request = request;
    y.storage = Storage::kBlocked;
    y.md = md;
    y.request = request;
  }
}

std::unique_ptr<CpuKernel> MakeLayoutTransposeKernel(BuildContext& ctx, const Node& node) {
  std::optional<std::vector<int64_t>> perm = LayoutPerm(node);
  if (!perm) return nullptr;
  const int xs = ctx.SlotOf(node.input(0)), ys = ctx.SlotOf(node.output(0));
  if (xs < 0 || ys < 0) return nullptr;
  Slot& x = ctx.slots[xs];
  Slot& y = ctx.slots[ys];
  const bool shared = x.storage == Storage::kBlocked && x.request >= 0 && x.request == y.request;
  if (shared) {  // placed by PlanLayoutTransposes
    ++ctx.free_transposes;
    return std::make_unique<NoKernel>();
  }
  if (x.is_plain() && y.is_plain()) return nullptr;
  if (!y.is_plain()) {
    // Placed for sharing, but the input is not in the shared buffer: one reorder into the
    // output's layout.
    return MakeReorder(ctx, xs, ctx.StoredMd(xs), ys, AsInputDims(y.md, *perm));
  }
  // The input is stored in a layout, the output wanted plain.
  const memory::desc plain_as_x = AsInputDims(ctx.PlainMd(ys), *perm);
  if (SamePlacement(x.md, plain_as_x) && x.storage == Storage::kBlocked && x.request >= 0 &&
      y.storage == Storage::kArena) {
    y.storage = Storage::kBlocked;  // plain, the input's bytes
    y.request = x.request;
    ctx.requests[x.request].last_step = std::max(ctx.requests[x.request].last_step, y.last_step);
    ++ctx.free_transposes;
    return std::make_unique<NoKernel>();
  }
  return MakeReorder(ctx, xs, x.md, ys, plain_as_x);
}

}  // namespace kiln::cpu

#include "runtime/cpu/slot_table.h"

#include "runtime/cpu/layout_transpose.h"

namespace kiln::cpu {
namespace {

absl::StatusOr<int> AddSlot(BuildContext& ctx, const Value* v, Storage storage) {
  auto it = ctx.slot_of.find(v->name);
  if (it != ctx.slot_of.end()) return it->second;
  if (!v->shape || !IsStatic(*v->shape)) {
    return absl::InvalidArgumentError("cpu engine: value '" + v->name +
                                      "' has no static shape (compile for one batch size)");
  }
  Slot s;
  s.name = v->name;
  s.dtype = v->dtype;
  s.shape = StaticDims(*v->shape);
  s.storage = storage;
  ctx.slots.push_back(std::move(s));
  const int id = static_cast<int>(ctx.slots.size()) - 1;
  ctx.slot_of[v->name] = id;
  return id;
}

// Node outputs that are not graph outputs: where the plan put them.
absl::Status AddPlanned(BuildContext& ctx, const Value* v, const plan::MemoryPlan& plan,
                        SlotBindings& b) {
  const plan::ValuePlan* vp = plan.Find(v->name);
  if (!vp) return absl::InternalError("cpu engine: value '" + v->name + "' is not planned");
  if (vp->external) {
    auto root = ctx.slot_of.find(vp->root);
    if (root == ctx.slot_of.end()) {
      return absl::InternalError("cpu engine: view root '" + vp->root + "' unknown");
    }
    ASSIGN_OR_RETURN(int id, AddSlot(ctx, v, Storage::kExternalView));
    ctx.slots[id].root = root->second;
    b.views.push_back({id, root->second});
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(int id, AddSlot(ctx, v, Storage::kArena));
  ctx.slots[id].offset = vp->offset;
  return absl::OkStatus();
}

// A Concat of rank-3..5 activations along their channels.
bool IsChannelConcat(const Node& n) {
  if (!n.domain.empty() || n.op_type != "Concat" || !n.output(0) || !n.output(0)->shape) {
    return false;
  }
  const int64_t rank = static_cast<int64_t>(n.output(0)->shape->size());
  const int64_t axis = n.GetInt("axis", 0);
  return rank >= 3 && rank <= 5 && (axis == 1 || axis == 1 - rank);
}

// A value may stay blocked when it is f32 (or 8-bit) of rank 3..5, not a graph output, and every
// use is the activation input (or the residual) of a conv-family node, an input of a channel
// Concat, the activation of a per-channel Add/Sub/Mul/Div (which work in that layout or
// reorder it themselves), or the input of a Transpose to channels-last.
void MarkBlockable(const Graph& graph, BuildContext& ctx) {
  for (Slot& s : ctx.slots) {
    // 8-bit too: a QDQ model's activations between int8 convolutions stay channels-last.
    const bool type_ok = s.dtype == DType::kFloat32 || s.dtype == DType::kUInt8 ||
                         s.dtype == DType::kInt8;
    s.blocked_ok = s.storage == Storage::kArena && type_ok && s.shape.size() >= 3 &&
                   s.shape.size() <= 5;
  }
  for (const auto& n : graph.nodes()) {
    for (size_t i = 0; i < n->inputs.size(); ++i) {
      const int s = ctx.SlotOf(n->inputs[i]);
      if (s < 0) continue;
      const bool residual = n->domain == kKilnDomain && i >= 3;
      if (IsChannelConcat(*n)) continue;  // concat_kernel.cc works in those layouts
      if (IsChannelsLastTranspose(*n)) continue;                             // layout_transpose.cc
      if (LayoutBinaryActivationInput(*n) == static_cast<int>(i)) continue;  // dnnl_binary.cc
      if (LayoutElementwiseInput(*n, i)) continue;  // elementwise_kernel.cc
      if (!IsConvFamily(*n) || (i != 0 && !residual)) ctx.slots[s].blocked_ok = false;
    }
  }
}

}  // namespace

absl::StatusOr<SlotBindings> BuildSlots(const Graph& graph, const plan::MemoryPlan& plan,
                                        BuildContext& ctx) {
  SlotBindings b;
  for (const Value* v : graph.inputs) {
    ASSIGN_OR_RETURN(int id, AddSlot(ctx, v, Storage::kInput));
    b.inputs.push_back(id);
  }
  for (const auto& v : graph.values()) {
    if (v->is_constant()) RETURN_IF_ERROR(AddSlot(ctx, v.get(), Storage::kConstant).status());
  }
  for (const Value* v : graph.outputs) {
    ASSIGN_OR_RETURN(int id, AddSlot(ctx, v, Storage::kOutput));
    b.outputs.push_back(id);
  }
  for (const auto& n : graph.nodes()) {
    for (const Value* v : n->outputs) {
      if (v && !ctx.slot_of.count(v->name)) RETURN_IF_ERROR(AddPlanned(ctx, v, plan, b));
    }
  }
  for (size_t step = 0; step < graph.nodes().size(); ++step) {
    for (const Value* v : graph.nodes()[step]->inputs) {
      const int s = ctx.SlotOf(v);
      if (s >= 0) ctx.slots[s].last_step = static_cast<int64_t>(step);
    }
  }
  MarkBlockable(graph, ctx);
  PlanLayoutTransposes(graph, ctx);
  return b;
}

}  // namespace kiln::cpu

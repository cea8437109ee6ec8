#include "runtime/cuda/arena_layout.h"

#include <set>

namespace kiln::cuda {
namespace {

int64_t AlignUp(int64_t n) { return (n + kDeviceAlign - 1) / kDeviceAlign * kDeviceAlign; }

absl::StatusOr<int64_t> BytesOf(const Value* v) {
  if (!v->shape || !IsStatic(*v->shape) || DTypeSize(v->dtype) == 0) {
    return absl::InvalidArgumentError("value '" + v->name + "' has no static dense shape");
  }
  return NumElements(StaticDims(*v->shape)) * static_cast<int64_t>(DTypeSize(v->dtype));
}

// Places `values` back to back in `region`; returns the region's size.
absl::StatusOr<int64_t> Pack(const std::vector<const Value*>& values, Region region, ArenaLayout& l) {
  int64_t total = 0;
  for (const Value* v : values) {
    ASSIGN_OR_RETURN(int64_t bytes, BytesOf(v));
    l.at[v->name] = {region, total};
    total += AlignUp(bytes);
  }
  return total;
}

// Constants read by device steps, constant graph outputs (drained from the device like any
// output), and constants that planned external views alias.
std::vector<const Value*> Weights(const Graph& graph, const plan::MemoryPlan& plan,
                                  const std::vector<const Value*>& device_constants) {
  std::vector<const Value*> w;
  std::set<std::string> seen;
  auto add = [&](const Value* v) {
    if (v && v->is_constant() && seen.insert(v->name).second) w.push_back(v);
  };
  for (const Value* v : device_constants) add(v);
  for (const Value* v : graph.outputs) add(v);
  for (const plan::ValuePlan& vp : plan.values) {
    if (vp.external) add(graph.FindValue(vp.root));
  }
  return w;
}

// Graph inputs, and graph outputs that no plan entry, input or constant already holds.
std::vector<const Value*> IoValues(const Graph& graph, const ArenaLayout& l) {
  std::vector<const Value*> io;
  std::set<std::string> seen;
  for (const Value* v : graph.inputs) {
    if (seen.insert(v->name).second) io.push_back(v);
  }
  for (const Value* v : graph.outputs) {
    if (!v->is_constant() && !l.at.count(v->name) && seen.insert(v->name).second) io.push_back(v);
  }
  return io;
}

absl::Status Staging(const Graph& graph, ArenaLayout& l) {
  for (const Value* v : graph.inputs) {
    ASSIGN_OR_RETURN(int64_t bytes, BytesOf(v));
    l.inputs.push_back(l.at.at(v->name));
    l.input_bytes.push_back(bytes);
  }
  for (const Value* v : graph.outputs) {
    ASSIGN_OR_RETURN(int64_t bytes, BytesOf(v));
    auto it = l.at.find(v->name);
    if (it == l.at.end()) return absl::InternalError("graph output '" + v->name + "' has no place");
    l.outputs.push_back(it->second);
    l.output_bytes.push_back(bytes);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ArenaLayout> LayOutArena(const Graph& graph, const plan::MemoryPlan& plan,
                                        const std::vector<const Value*>& device_constants) {
  ArenaLayout l;
  l.arena_bytes = plan.arena_bytes;
  for (const plan::ValuePlan& vp : plan.values) {
    if (!vp.external) l.at[vp.name] = {Region::kArena, vp.offset};
  }
  l.weights = Weights(graph, plan, device_constants);
  ASSIGN_OR_RETURN(l.weight_bytes, Pack(l.weights, Region::kWeights, l));
  ASSIGN_OR_RETURN(l.io_bytes, Pack(IoValues(graph, l), Region::kIo, l));
  // External views last: their roots (inputs, outputs, constants) are placed now. Views of
  // views resolve in schedule order.
  for (const plan::ValuePlan& vp : plan.values) {
    if (!vp.external) continue;
    auto root = l.at.find(vp.root);
    if (root == l.at.end()) return absl::InternalError("view '" + vp.name + "' of unplaced '" + vp.root + "'");
    l.at[vp.name] = root->second;
  }
  RETURN_IF_ERROR(Staging(graph, l));
  return l;
}

}  // namespace kiln::cuda

#include "runtime/cuda/device_arena.h"

#include <cstring>
#include <set>

#include "runtime/cuda/cuda_status.h"

namespace kiln::cuda {
namespace {

constexpr size_t kAlign = 256;  // cudaMalloc's own alignment, kept for every sub-buffer

size_t AlignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

absl::StatusOr<size_t> BytesOf(const Value* v) {
  if (!v->shape || !IsStatic(*v->shape) || DTypeSize(v->dtype) == 0) {
    return absl::InvalidArgumentError("value '" + v->name + "' has no static dense shape");
  }
  return static_cast<size_t>(NumElements(StaticDims(*v->shape))) * DTypeSize(v->dtype);
}

// One allocation holding `values` back to back; records their pointers.
absl::StatusOr<DeviceBuffer> Pack(const std::vector<const Value*>& values, DeviceArena& a) {
  size_t total = 0;
  std::vector<size_t> offsets;
  for (const Value* v : values) {
    ASSIGN_OR_RETURN(size_t bytes, BytesOf(v));
    offsets.push_back(total);
    total += AlignUp(bytes);
  }
  ASSIGN_OR_RETURN(DeviceBuffer buf, DeviceBuffer::Allocate(total));
  for (size_t i = 0; i < values.size(); ++i) {
    a.ptrs[values[i]->name] = static_cast<char*>(buf.get()) + offsets[i];
  }
  return buf;
}

// Constants read by device steps, constant graph outputs, and those that planned external
// views alias.
std::vector<const Value*> Weights(const Graph& graph, const plan::MemoryPlan& plan,
                                  const std::vector<const Value*>& device_constants) {
  std::vector<const Value*> w;
  std::set<std::string> seen;
  auto add = [&](const Value* v) {
    if (v && v->is_constant() && seen.insert(v->name).second) w.push_back(v);
  };
  for (const Value* v : device_constants) add(v);
  for (const Value* v : graph.outputs) add(v);  // drained from the device like any output
  for (const plan::ValuePlan& vp : plan.values) {
    if (vp.external) add(graph.FindValue(vp.root));
  }
  return w;
}

absl::Status UploadWeights(const std::vector<const Value*>& weights, DeviceArena& a) {
  ASSIGN_OR_RETURN(a.weights, Pack(weights, a));
  for (const Value* v : weights) {
    const Tensor& t = *v->constant;
    a.weight_bytes += static_cast<int64_t>(t.nbytes());
    if (t.nbytes() > 0) KILN_CUDA(cudaMemcpy(a.ptrs[v->name], t.raw(), t.nbytes(), cudaMemcpyHostToDevice));
  }
  return absl::OkStatus();
}

// Graph inputs, and graph outputs that no plan entry, input or constant already holds.
std::vector<const Value*> IoValues(const Graph& graph, const DeviceArena& a) {
  std::vector<const Value*> io;
  std::set<std::string> seen;
  for (const Value* v : graph.inputs) {
    if (seen.insert(v->name).second) io.push_back(v);
  }
  for (const Value* v : graph.outputs) {
    if (!v->is_constant() && !a.ptrs.count(v->name) && seen.insert(v->name).second) io.push_back(v);
  }
  return io;
}

absl::Status Staging(const Graph& graph, DeviceArena& a) {
  size_t total = 0;
  std::vector<size_t> sizes;
  for (const auto* list : {&graph.inputs, &graph.outputs}) {
    for (const Value* v : *list) {
      ASSIGN_OR_RETURN(size_t bytes, BytesOf(v));
      sizes.push_back(bytes);
      total += AlignUp(bytes);
    }
  }
  ASSIGN_OR_RETURN(a.staging, PinnedBuffer::Allocate(total));
  char* host = static_cast<char*>(a.staging.get());
  size_t i = 0;
  for (const Value* v : graph.inputs) {
    a.in_device.push_back(a.ptrs.at(v->name));
    a.in_host.push_back(host);
    a.in_bytes.push_back(sizes[i]);
    host += AlignUp(sizes[i++]);
  }
  for (const Value* v : graph.outputs) {
    a.out_device.push_back(a.ptrs.at(v->name));
    a.out_host.push_back(host);
    a.out_bytes.push_back(sizes[i]);
    host += AlignUp(sizes[i++]);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DeviceArena> AllocateArena(const Graph& graph, const plan::MemoryPlan& plan,
                                          const std::vector<const Value*>& device_constants) {
  DeviceArena a;
  ASSIGN_OR_RETURN(a.arena, DeviceBuffer::Allocate(static_cast<size_t>(plan.arena_bytes)));
  for (const plan::ValuePlan& vp : plan.values) {
    if (!vp.external) a.ptrs[vp.name] = static_cast<char*>(a.arena.get()) + vp.offset;
  }
  RETURN_IF_ERROR(UploadWeights(Weights(graph, plan, device_constants), a));
  ASSIGN_OR_RETURN(a.io, Pack(IoValues(graph, a), a));
  // External views last: their roots (inputs, outputs, constants) now have pointers. Views
  // of views resolve in schedule order.
  for (const plan::ValuePlan& vp : plan.values) {
    if (!vp.external) continue;
    auto root = a.ptrs.find(vp.root);
    if (root == a.ptrs.end()) return absl::InternalError("view '" + vp.name + "' of unplaced '" + vp.root + "'");
    a.ptrs[vp.name] = root->second;
  }
  RETURN_IF_ERROR(Staging(graph, a));
  return a;
}

}  // namespace kiln::cuda

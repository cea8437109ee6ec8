#include "runtime/cuda/device_arena.h"

#include "runtime/cuda/cuda_status.h"

namespace kiln::cuda {
namespace {

void* Resolve(const DeviceArena& a, Placement p) {
  const DeviceBuffer& b = p.region == Region::kArena ? a.arena : (p.region == Region::kIo ? a.io : a.weights);
  return static_cast<char*>(b.get()) + p.offset;
}

absl::Status Stage(const ArenaLayout& l, DeviceArena& a) {
  int64_t total = 0;
  for (int64_t b : l.input_bytes) total += (b + kDeviceAlign - 1) / kDeviceAlign * kDeviceAlign;
  for (int64_t b : l.output_bytes) total += (b + kDeviceAlign - 1) / kDeviceAlign * kDeviceAlign;
  ASSIGN_OR_RETURN(a.staging, PinnedBuffer::Allocate(static_cast<size_t>(total)));
  char* host = static_cast<char*>(a.staging.get());
  auto take = [&](int64_t bytes) {
    char* p = host;
    host += (bytes + kDeviceAlign - 1) / kDeviceAlign * kDeviceAlign;
    return p;
  };
  for (size_t i = 0; i < l.inputs.size(); ++i) {
    a.in_device.push_back(Resolve(a, l.inputs[i]));
    a.in_host.push_back(take(l.input_bytes[i]));
    a.in_bytes.push_back(static_cast<size_t>(l.input_bytes[i]));
  }
  for (size_t k = 0; k < l.outputs.size(); ++k) {
    a.out_device.push_back(Resolve(a, l.outputs[k]));
    a.out_host.push_back(take(l.output_bytes[k]));
    a.out_bytes.push_back(static_cast<size_t>(l.output_bytes[k]));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DeviceArena> AllocateArena(const ArenaLayout& l) {
  DeviceArena a;
  ASSIGN_OR_RETURN(a.arena, DeviceBuffer::Allocate(static_cast<size_t>(l.arena_bytes)));
  ASSIGN_OR_RETURN(a.io, DeviceBuffer::Allocate(static_cast<size_t>(l.io_bytes)));
  ASSIGN_OR_RETURN(a.weights, DeviceBuffer::Allocate(static_cast<size_t>(l.weight_bytes)));
  for (const auto& [name, p] : l.at) a.ptrs[name] = Resolve(a, p);
  for (const Value* v : l.weights) {
    const Tensor& t = *v->constant;
    a.weight_bytes += static_cast<int64_t>(t.nbytes());
    if (t.nbytes() > 0) KILN_CUDA(cudaMemcpy(a.ptrs.at(v->name), t.raw(), t.nbytes(), cudaMemcpyHostToDevice));
  }
  RETURN_IF_ERROR(Stage(l, a));
  return a;
}

}  // namespace kiln::cuda

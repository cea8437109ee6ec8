#include "runtime/cuda/device_memory.h"

#include <algorithm>
#include <utility>

#include "runtime/cuda/cuda_status.h"

namespace kiln::cuda {

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  std::swap(p_, o.p_);
  std::swap(bytes_, o.bytes_);
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (p_) cudaFree(p_);  // errors at teardown have nowhere to go
}

absl::StatusOr<DeviceBuffer> DeviceBuffer::Allocate(size_t bytes) {
  DeviceBuffer b;
  b.bytes_ = std::max<size_t>(bytes, 256);
  KILN_CUDA(cudaMalloc(&b.p_, b.bytes_));
  return b;
}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  std::swap(p_, o.p_);
  std::swap(bytes_, o.bytes_);
  return *this;
}

PinnedBuffer::~PinnedBuffer() {
  if (p_) cudaFreeHost(p_);
}

absl::StatusOr<PinnedBuffer> PinnedBuffer::Allocate(size_t bytes) {
  PinnedBuffer b;
  b.bytes_ = std::max<size_t>(bytes, 64);
  KILN_CUDA(cudaHostAlloc(&b.p_, b.bytes_, cudaHostAllocDefault));
  return b;
}

}  // namespace kiln::cuda

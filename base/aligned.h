// 64-byte aligned heap buffers (a cache line, and the widest vector load): the one way Kiln
// allocates them, for tensors (ir/tensor.cc) and the CPU kernels' private buffers.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>

namespace kiln {

inline constexpr size_t kBufferAlignment = 64;

// `bytes` rounded up to a whole number of 64-byte lines, at least one (aligned_alloc needs a
// multiple of the alignment, and a zero-byte buffer still gets an address).
inline size_t AlignedSize(size_t bytes) {
  const size_t lines = (bytes + kBufferAlignment - 1) / kBufferAlignment;
  return (lines == 0 ? 1 : lines) * kBufferAlignment;
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
template <class T = void>
using AlignedPtr = std::unique_ptr<T, FreeDeleter>;

// AlignedSize(bytes) bytes, uninitialised; null when the allocation fails.
template <class T = void>
AlignedPtr<T> NewAlignedBuffer(size_t bytes) {
  return AlignedPtr<T>(static_cast<T*>(std::aligned_alloc(kBufferAlignment, AlignedSize(bytes))));
}

}  // namespace kiln

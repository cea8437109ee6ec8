// Internal to runtime/cpu: Kiln's own kernels (no oneDNN primitive), one factory per file.
// Each returns nullptr for nodes outside what it handles.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "runtime/cpu/build_context.h"


namespace kiln::cpu {

// Element counts from which an own kernel splits its loop over the OpenMP team: below it a
// sleeping thread's wake-up costs more than its half of the work saves.
constexpr int64_t kParallelElements = 1 << 16;

// body(thread, begin, end) over [0, n) cut into one contiguous range per thread (at most
// `max_threads` ranges; thread < max_threads), for kernels that keep per-thread state.
// Serial (body(0, 0, n)) unless `parallel` and the team has more than one thread: a region
// whose `if` clause is false (or whose team is one thread) is not free, libgomp still builds
// that team on the heap and frees it at the region's end.
template <typename Body>
void ForEachChunk(int64_t n, bool parallel, int max_threads, Body&& body) {
  const int64_t team = std::min<int64_t>({omp_get_max_threads(), max_threads, n});
  if (!parallel || team < 2) {
    body(0, int64_t{0}, n);
    return;
  }
#pragma omp parallel num_threads(static_cast<int>(team))
  {
    const int64_t t = omp_get_thread_num(), parts = omp_get_num_threads();
    body(static_cast<int>(t), n * t / parts, n * (t + 1) / parts);
  }
}

// body(i) for i in [0, n), split like ForEachChunk.
template <typename Body>
void ForEachIndex(int64_t n, bool parallel, Body&& body) {
  ForEachChunk(n, parallel, std::numeric_limits<int>::max(), [&](int, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) body(i);
  });
}

// Kernels that only move elements (transpose, slice, where, layout copies) treat any dtype as
// an unsigned word of its size.
inline bool IsWordSize(size_t bytes) { return bytes == 1 || bytes == 2 || bytes == 4 || bytes == 8; }

// f(W{}) with W the unsigned integer type of `bytes` (1, 2, 4; anything else 8).
template <typename F>
void WithWordType(size_t bytes, F&& f) {
  switch (bytes) {
    case 1: f(uint8_t{}); break;
    case 2: f(uint16_t{}); break;
    case 4: f(uint32_t{}); break;
    default: f(uint64_t{}); break;
  }
}

// A kernel that only moves elements: Run calls Derived's `template <class T> void
// Walk(const ExecContext&)` with T the unsigned word of the element size given here.
template <class Derived>
class WordKernel : public CpuKernel {
 public:
  bool follows_team() const override { return true; }
  explicit WordKernel(size_t elem) : word_bytes_(elem) {}
  absl::Status Run(const ExecContext& ctx) override {
    WithWordType(word_bytes_, [&](auto word) {
      static_cast<Derived*>(this)->template Walk<decltype(word)>(ctx);
    });
    return absl::OkStatus();
  }

 private:
  size_t word_bytes_;
};

// Cast's conversion (cast_kernel.cc: the reference's rules) of n elements read from
// x[start + i * stride] into y[i]; the element-wise kernel converts integer inputs of fused
// programs with it too.
using CastFn = void (*)(const void* x, int64_t start, int64_t stride, void* y, int64_t n);
// nullptr for a pair of dtypes the kernel does not convert.
CastFn CastFor(DType from, DType to);

// Numpy broadcasting of shape `in` against `out`: `in`'s element strides in `out`'s index
// space (0 on broadcast dims); nullopt when `in` does not broadcast to `out`.
std::optional<std::vector<int64_t>> BroadcastStrides(const std::vector<int64_t>& in,
                                                     const std::vector<int64_t>& out);

std::unique_ptr<CpuKernel> MakeViewKernel(BuildContext& ctx, const Node& node);
std::unique_ptr<CpuKernel> MakeElementwiseKernel(BuildContext& ctx, const Node& node);
std::unique_ptr<CpuKernel> MakeSoftmaxKernel(BuildContext& ctx, const Node& node);
std::unique_ptr<CpuKernel> MakeLayerNormKernel(BuildContext& ctx, const Node& node);
std::unique_ptr<CpuKernel> MakeTransposeKernel(BuildContext& ctx, const Node& node);
std::unique_ptr<CpuKernel> MakeGatherKernel(BuildContext& ctx, const Node& node);
std::unique_ptr<CpuKernel> MakeConcatKernel(BuildContext& ctx, const Node& node);
// The layout concatenation's copy: for each of `groups` groups, input k's `run[k]` bytes
// (from its group's offset) one after another into `out` (concat_kernel.cc).
std::unique_ptr<CpuKernel> NewGroupConcat(std::vector<int> in, std::vector<size_t> run, int out,
                                          int64_t groups);
std::unique_ptr<CpuKernel> MakeReduceKernel(BuildContext& ctx, const Node& node);
std::unique_ptr<CpuKernel> MakeSliceKernel(BuildContext& ctx, const Node& node);
std::unique_ptr<CpuKernel> MakeSplitKernel(BuildContext& ctx, const Node& node);
std::unique_ptr<CpuKernel> MakeExpandKernel(BuildContext& ctx, const Node& node);
std::unique_ptr<CpuKernel> MakeCastKernel(BuildContext& ctx, const Node& node);
// QuantizeLinear / DequantizeLinear with float32 scales, per tensor or per axis
// (quantize_kernel.cc).
std::unique_ptr<CpuKernel> MakeQuantizeKernel(BuildContext& ctx, const Node& node);
std::unique_ptr<CpuKernel> MakeWhereKernel(BuildContext& ctx, const Node& node);
std::unique_ptr<CpuKernel> MakePadKernel(BuildContext& ctx, const Node& node);
std::unique_ptr<CpuKernel> MakeResizeKernel(BuildContext& ctx, const Node& node);
std::unique_ptr<CpuKernel> MakeRecurrentKernel(BuildContext& ctx, const Node& node);

}  // namespace kiln::cpu

// Internal to runtime/cuda (includes the CUDA headers): the state shared by the engine and
// the step factories while an engine is built, and the step interface used at run time.
//
// Engines serve static shapes and own their device memory, so every device pointer is known
// at build: a step binds its pointers once, and Run only enqueues the steps (or replays the
// CUDA graph they were captured into). Nothing is allocated per run.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "compiler/codegen/cuda_kernel.h"
#include "ir/graph.h"
#include "runtime/cuda/conv_plan.h"
#include "runtime/cuda/matmul_plan.h"

namespace kiln::cuda {

// One unit of a run, enqueued on the engine's stream in schedule order.
class Step {
 public:
  virtual ~Step() = default;
  virtual absl::Status Enqueue(cudaStream_t stream) = 0;
};
using StepList = std::vector<std::unique_ptr<Step>>;

// The first error of a host callback (a fallback kernel), which cannot return one through
// the stream; the engine reads it after the run's synchronisation.
class HostErrors {
 public:
  void Record(absl::Status st);
  absl::Status TakeFirst();

 private:
  std::mutex mu_;
  absl::Status first_;
};

struct BuildContext {
  int device = 0;
  cudaDeviceProp prop{};
  bool tf32 = false;
  cudnnHandle_t cudnn = nullptr;
  cublasLtHandle_t lt = nullptr;
  // Device pointer of every value a step reads or writes (arena, weights, inputs, outputs).
  std::unordered_map<std::string, void*> ptrs;
  // A zero-filled device buffer (the bias of a fused convolution that has none).
  void* zeros = nullptr;
  size_t zeros_bytes = 0;
  // cuDNN's and cuBLASLt's shared scratch: sized from what every step needs
  // (workspace_bytes), allocated once after the steps exist; steps read `workspace` when
  // they enqueue, which is after that.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  // Scratch for measuring convolution algorithms while building.
  void* find_workspace = nullptr;
  size_t find_workspace_bytes = 0;
  // Convolution algorithms, one per convolution in schedule order: given by an earlier build
  // (reused), else measured; `chosen` is what this build uses.
  std::vector<int> given_algos;
  std::vector<int> chosen_algos;
  // Generated kernels of the whole engine, compiled as one module once the steps exist;
  // launch steps read handles[i] (filled after loading) when they enqueue.
  std::vector<codegen::Kernel> kernels;
  std::vector<cudaKernel_t> handles;
  HostErrors* host_errors = nullptr;

  absl::StatusOr<void*> Ptr(const Value* v) const;
};

absl::StatusOr<std::unique_ptr<Step>> MakeConvStep(BuildContext& ctx, const Node& node, const ConvPlan& plan);
absl::StatusOr<std::unique_ptr<Step>> MakeMatmulStep(BuildContext& ctx, const Node& node,
                                                     const MatmulPlan& plan);
// One launch per kernel; the kernels join ctx.kernels.
absl::StatusOr<StepList> MakeKernelSteps(BuildContext& ctx, const Node& node,
                                         const std::vector<codegen::Kernel>& kernels);
// The node's reference kernel on the host: inputs copied to pinned buffers, a host callback,
// outputs copied back (all on the stream, so it is captured like any other step).
absl::StatusOr<std::unique_ptr<Step>> MakeFallbackStep(BuildContext& ctx, const Node& node);
std::unique_ptr<Step> MakeCopyStep(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);

}  // namespace kiln::cuda

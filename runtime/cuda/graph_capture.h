// Internal to runtime/cuda: a run's steps captured once into a CUDA graph and replayed (the
// launcher part of the backend): one cudaGraphLaunch instead of a launch per kernel, copy and
// library call.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>

#include "base/status.h"

namespace kiln::cuda {

class CapturedRun {
 public:
  CapturedRun() = default;
  CapturedRun(const CapturedRun&) = delete;
  CapturedRun& operator=(const CapturedRun&) = delete;
  ~CapturedRun() { Reset(); }
  void Reset();

  // Records what `enqueue` puts on `stream` (nothing runs) and instantiates it. On error the
  // stream is left out of capture mode and nothing is kept.
  absl::Status Capture(cudaStream_t stream, const std::function<absl::Status()>& enqueue);
  bool ready() const { return exec_ != nullptr; }
  absl::Status Launch(cudaStream_t stream) const;
  size_t nodes() const { return nodes_; }

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  size_t nodes_ = 0;
};

}  // namespace kiln::cuda

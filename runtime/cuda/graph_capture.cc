#include "runtime/cuda/graph_capture.h"

#include "runtime/cuda/cuda_status.h"

namespace kiln::cuda {

void CapturedRun::Reset() {
  if (exec_) cudaGraphExecDestroy(exec_);
  if (graph_) cudaGraphDestroy(graph_);
  exec_ = nullptr;
  graph_ = nullptr;
  nodes_ = 0;
}

absl::Status CapturedRun::Capture(cudaStream_t stream, const std::function<absl::Status()>& enqueue) {
  // Thread-local mode: another engine capturing or running on another thread is unaffected.
  KILN_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const absl::Status enqueued = enqueue();
  cudaGraph_t graph = nullptr;
  const absl::Status ended = CudaStatus(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
  if (!enqueued.ok() || !ended.ok()) {
    if (graph) cudaGraphDestroy(graph);
    // A failed capture leaves its error (cudaErrorStreamCaptureInvalidated, ...) as the
    // thread's last error; cleared here so that the next, unrelated CUDA call's check does
    // not report it.
    (void)cudaGetLastError();
    return enqueued.ok() ? ended : enqueued;
  }
  graph_ = graph;
  KILN_CUDA(cudaGraphGetNodes(graph_, nullptr, &nodes_));
  KILN_CUDA(cudaGraphInstantiate(&exec_, graph_, 0));
  return absl::OkStatus();
}

absl::Status CapturedRun::Launch(cudaStream_t stream) const {
  KILN_CUDA(cudaGraphLaunch(exec_, stream));
  return absl::OkStatus();
}

}  // namespace kiln::cuda

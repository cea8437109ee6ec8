// Internal to runtime/cuda: every CUDA runtime, cuDNN, cuBLAS(Lt) and NVRTC status becomes
// an absl::Status naming the call. Out-of-memory is RESOURCE_EXHAUSTED; a missing or too old
// driver, or no device, is FAILED_PRECONDITION (the machine cannot run the engine); the
// rest is INTERNAL.
#pragma once

#include <cublas_api.h>
#include <cuda_runtime_api.h>
#include <cudnn_graph.h>
#include <nvrtc.h>

#include "base/status.h"

namespace kiln::cuda {

absl::Status CudaStatus(cudaError_t e, const char* call);
absl::Status CudnnStatus(cudnnStatus_t s, const char* call);
absl::Status CublasStatus(cublasStatus_t s, const char* call);
absl::Status NvrtcStatus(nvrtcResult r, const char* call);

// "13.0" from CUDA's 13000-style version numbers.
std::string CudaVersionString(int v);

}  // namespace kiln::cuda

#define KILN_CUDA(expr) RETURN_IF_ERROR(::kiln::cuda::CudaStatus((expr), #expr))
#define KILN_CUDNN(expr) RETURN_IF_ERROR(::kiln::cuda::CudnnStatus((expr), #expr))
#define KILN_CUBLAS(expr) RETURN_IF_ERROR(::kiln::cuda::CublasStatus((expr), #expr))
#define KILN_NVRTC(expr) RETURN_IF_ERROR(::kiln::cuda::NvrtcStatus((expr), #expr))

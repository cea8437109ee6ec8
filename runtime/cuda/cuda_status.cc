#include "runtime/cuda/cuda_status.h"

#include <string>

#include "runtime/cuda/cuda_libs.h"

namespace kiln::cuda {
namespace {

std::string Call(const char* call) {
  // The macro passes the whole expression; its function name is enough (without the
  // library table it was called through: "Dnn().cudnnCreate(&h)" -> "cudnnCreate").
  std::string s(call);
  size_t paren = s.find('(');
  if (paren != std::string::npos && s.compare(paren, 3, "().") == 0) {
    s = s.substr(paren + 3);
    paren = s.find('(');
  }
  return paren == std::string::npos ? s : s.substr(0, paren);
}

}  // namespace

absl::Status CudaStatus(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return absl::OkStatus();
  const std::string msg = Call(call) + ": " + cudaGetErrorString(e) + " (" + cudaGetErrorName(e) + ")";
  switch (e) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(msg);
    case cudaErrorInsufficientDriver:
    case cudaErrorNoDevice:
    case cudaErrorInvalidDevice:
    case cudaErrorDevicesUnavailable:
    case cudaErrorCompatNotSupportedOnDevice:
      return absl::FailedPreconditionError(msg);
    default:
      return absl::InternalError(msg);
  }
}

absl::Status CudnnStatus(cudnnStatus_t s, const char* call) {
  if (s == CUDNN_STATUS_SUCCESS) return absl::OkStatus();
  const CudnnApi* dnn = LoadedCudnn();
  const std::string msg = Call(call) + ": " +
                          (dnn ? dnn->cudnnGetErrorString(s) : "cuDNN status " + std::to_string(static_cast<int>(s)));
  if (s == CUDNN_STATUS_ALLOC_FAILED) return absl::ResourceExhaustedError(msg);
  if (s == CUDNN_STATUS_NOT_SUPPORTED) return absl::UnimplementedError(msg);
  return absl::InternalError(msg);
}

absl::Status CublasStatus(cublasStatus_t s, const char* call) {
  if (s == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  const std::string msg = Call(call) + ": cuBLAS status " + std::to_string(static_cast<int>(s));
  if (s == CUBLAS_STATUS_ALLOC_FAILED) return absl::ResourceExhaustedError(msg);
  if (s == CUBLAS_STATUS_NOT_SUPPORTED) return absl::UnimplementedError(msg);
  return absl::InternalError(msg);
}

absl::Status NvrtcStatus(nvrtcResult r, const char* call) {
  if (r == NVRTC_SUCCESS) return absl::OkStatus();
  const NvrtcApi* rtc = LoadedNvrtc();
  const std::string msg = Call(call) + ": " +
                          (rtc ? rtc->nvrtcGetErrorString(r) : "NVRTC result " + std::to_string(static_cast<int>(r)));
  if (r == NVRTC_ERROR_OUT_OF_MEMORY) return absl::ResourceExhaustedError(msg);
  return absl::InternalError(msg);
}

std::string CudaVersionString(int v) {
  if (v <= 0) return "";
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

}  // namespace kiln::cuda

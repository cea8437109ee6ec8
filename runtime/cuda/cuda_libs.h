// Internal to runtime/cuda: cuDNN, cuBLASLt and NVRTC opened at run time (dlopen) instead of
// linked, so every Kiln binary built with CUDA still starts where those libraries are absent
// (a CPU-only container, a machine without the toolkit): only the cuda device is then
// unusable, and says which library is missing. The CUDA runtime is linked statically and
// finds the driver the same way.
//
// Call sites use the C names through the loaded table: Dnn().cudnnCreate(&h).
#pragma once

#include <cublasLt.h>
#include <cudnn.h>
#include <nvrtc.h>

#include <string>
#include <vector>

#include "base/status.h"

#define KILN_CUDNN_API(X)                                                                      \
  X(cudnnGetVersion) X(cudnnGetErrorString) X(cudnnCreate) X(cudnnDestroy) X(cudnnSetStream)   \
  X(cudnnCreateTensorDescriptor) X(cudnnDestroyTensorDescriptor) X(cudnnSetTensorNdDescriptorEx) \
  X(cudnnCreateFilterDescriptor) X(cudnnDestroyFilterDescriptor) X(cudnnSetFilterNdDescriptor) \
  X(cudnnCreateConvolutionDescriptor) X(cudnnDestroyConvolutionDescriptor)                     \
  X(cudnnSetConvolutionNdDescriptor) X(cudnnSetConvolutionGroupCount)                          \
  X(cudnnSetConvolutionMathType) X(cudnnCreateActivationDescriptor)                            \
  X(cudnnDestroyActivationDescriptor) X(cudnnSetActivationDescriptor)                          \
  X(cudnnFindConvolutionForwardAlgorithmEx) X(cudnnGetConvolutionForwardWorkspaceSize)         \
  X(cudnnConvolutionForward) X(cudnnConvolutionBiasActivationForward)

#define KILN_CUBLASLT_API(X)                                                                 \
  X(cublasLtGetVersion) X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtMatmul)               \
  X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy) X(cublasLtMatmulDescSetAttribute) \
  X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutDestroy)                               \
  X(cublasLtMatrixLayoutSetAttribute) X(cublasLtMatmulPreferenceCreate)                      \
  X(cublasLtMatmulPreferenceDestroy) X(cublasLtMatmulPreferenceSetAttribute)                 \
  X(cublasLtMatmulAlgoGetHeuristic)

#define KILN_NVRTC_API(X)                                                                     \
  X(nvrtcVersion) X(nvrtcGetErrorString) X(nvrtcCreateProgram) X(nvrtcDestroyProgram)         \
  X(nvrtcCompileProgram) X(nvrtcGetProgramLogSize) X(nvrtcGetProgramLog) X(nvrtcGetPTXSize)   \
  X(nvrtcGetPTX) X(nvrtcGetCUBINSize) X(nvrtcGetCUBIN) X(nvrtcGetNumSupportedArchs)           \
  X(nvrtcGetSupportedArchs)

namespace kiln::cuda {

#define KILN_API_MEMBER(f) decltype(&::f) f = nullptr;
struct CudnnApi {
  KILN_CUDNN_API(KILN_API_MEMBER)
};
struct CublasLtApi {
  KILN_CUBLASLT_API(KILN_API_MEMBER)
};
struct NvrtcApi {
  KILN_NVRTC_API(KILN_API_MEMBER)
};
#undef KILN_API_MEMBER

// Each library is opened once per process: its soname (libcudnn.so.9, libcublasLt.so.13,
// libnvrtc.so.13: the majors this build compiled against) from the first place of
// library_search.h that has one (KILN_CUDA_LIBRARY_PATH, the loader's path, pip wheels and
// PyTorch, the toolkit, the driver's folder). FAILED_PRECONDITION with the loader's
// messages (dlerror) when it is missing, will not load or lacks a function.
absl::StatusOr<const CudnnApi*> LoadCudnn();
absl::StatusOr<const CublasLtApi*> LoadCublasLt();
absl::StatusOr<const NvrtcApi*> LoadNvrtc();
absl::Status LoadCudaLibraries();  // all three

// Which file each library came from ("" when it did not open), and its companions that would
// not load (cuDNN's parts, NVRTC's builtins), with the loader's message: `kiln devices`.
struct LibraryOrigin {
  std::string name, file;
  std::vector<std::string> notes;
};
std::vector<LibraryOrigin> CudaLibraryOrigins();

// The search the loaders above use, for any soname: the file it opened, else
// FAILED_PRECONDITION carrying every loader message (tests; the handle stays open).
absl::StatusOr<std::string> OpenLibraryFile(const std::string& soname);

// The loaded tables. Precondition: the matching Load* succeeded (an engine loads all three
// before anything else; NVRTC's users load it first).
const CudnnApi& Dnn();
const CublasLtApi& Lt();
const NvrtcApi& Rtc();
// nullptr when the library cannot be opened (status messages use them when they can).
const CudnnApi* LoadedCudnn();
const NvrtcApi* LoadedNvrtc();

}  // namespace kiln::cuda

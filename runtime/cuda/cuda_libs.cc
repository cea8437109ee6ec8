#include "runtime/cuda/cuda_libs.h"

#include <cublas_api.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

namespace kiln::cuda {
namespace {

template <class Api>
struct Library {
  absl::Status status;
  Api api;
};

// dlopen of `soname`, else of the copy in `dir` (where the build found it); the first
// failure's message otherwise.
void* Open(const std::string& soname, const char* dir, std::string& error) {
  void* h = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h) return h;
  error = dlerror();
  return dlopen((std::string(dir) + "/" + soname).c_str(), RTLD_NOW | RTLD_LOCAL);
}

#define KILN_API_LOAD(f)                                                                  \
  lib.api.f = reinterpret_cast<decltype(lib.api.f)>(dlsym(h, #f));                        \
  if (!lib.api.f) {                                                                       \
    lib.status = absl::FailedPreconditionError(soname + " has no function " #f);          \
    return lib;                                                                           \
  }

Library<CudnnApi> OpenCudnn() {
  Library<CudnnApi> lib;
  const std::string soname = "libcudnn.so." + std::to_string(CUDNN_MAJOR);
  std::string error;
  void* h = Open(soname, KILN_CUDNN_LIB_DIR, error);
  if (!h) {
    lib.status = absl::FailedPreconditionError(error);
    return lib;
  }
  KILN_CUDNN_API(KILN_API_LOAD)
  return lib;
}

Library<CublasLtApi> OpenCublasLt() {
  Library<CublasLtApi> lib;
  const std::string soname = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
  std::string error;
  void* h = Open(soname, KILN_CUDA_LIB_DIR, error);
  if (!h) {
    lib.status = absl::FailedPreconditionError(error);
    return lib;
  }
  KILN_CUBLASLT_API(KILN_API_LOAD)
  return lib;
}

Library<NvrtcApi> OpenNvrtc() {
  Library<NvrtcApi> lib;
  // NVRTC's major is the CUDA major it ships with.
  const std::string soname = "libnvrtc.so." + std::to_string(CUDART_VERSION / 1000);
  std::string error;
  void* h = Open(soname, KILN_CUDA_LIB_DIR, error);
  if (!h) {
    lib.status = absl::FailedPreconditionError(error);
    return lib;
  }
  KILN_NVRTC_API(KILN_API_LOAD)
  return lib;
}

#undef KILN_API_LOAD

// Opened on first use, thread-safely; the handles stay open for the process.
const Library<CudnnApi>& CudnnLib() {
  static const auto* lib = new Library<CudnnApi>(OpenCudnn());
  return *lib;
}
const Library<CublasLtApi>& CublasLtLib() {
  static const auto* lib = new Library<CublasLtApi>(OpenCublasLt());
  return *lib;
}
const Library<NvrtcApi>& NvrtcLib() {
  static const auto* lib = new Library<NvrtcApi>(OpenNvrtc());
  return *lib;
}

template <class Api>
absl::StatusOr<const Api*> Result(const Library<Api>& lib) {
  if (!lib.status.ok()) return lib.status;
  return &lib.api;
}

}  // namespace

absl::StatusOr<const CudnnApi*> LoadCudnn() { return Result(CudnnLib()); }
absl::StatusOr<const CublasLtApi*> LoadCublasLt() { return Result(CublasLtLib()); }
absl::StatusOr<const NvrtcApi*> LoadNvrtc() { return Result(NvrtcLib()); }

absl::Status LoadCudaLibraries() {
  RETURN_IF_ERROR(LoadCudnn().status());
  RETURN_IF_ERROR(LoadCublasLt().status());
  return LoadNvrtc().status();
}

const CudnnApi& Dnn() { return CudnnLib().api; }
const CublasLtApi& Lt() { return CublasLtLib().api; }
const NvrtcApi& Rtc() { return NvrtcLib().api; }

const CudnnApi* LoadedCudnn() { return CudnnLib().status.ok() ? &CudnnLib().api : nullptr; }
const NvrtcApi* LoadedNvrtc() { return NvrtcLib().status.ok() ? &NvrtcLib().api : nullptr; }

}  // namespace kiln::cuda

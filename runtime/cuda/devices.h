// What Kiln can use on this machine's CUDA side (`kiln devices`, the engine cache's device
// fingerprint): whether the backend is compiled in, the library versions it loads, and the
// GPUs found or why there are none. Dependency-light: no CUDA headers.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kiln::cuda {

struct GpuInfo {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;  // compute capability
  int64_t memory_bytes = 0;
  int multiprocessors = 0;
};

struct CudaReport {
  bool compiled = false;     // built with the CUDA toolkit
  std::string toolkit;       // the toolkit the build used ("13.0")
  std::string runtime;       // CUDA runtime version ("13.0"; the runtime is linked statically)
  std::string driver;        // CUDA version the driver supports ("13.0"), or "" without a driver
  std::string nvrtc, cudnn, cublas;  // versions of the loaded libraries ("" when missing)
  std::vector<std::string> missing;  // libraries that could not be opened, with the reason
  // Which file each opened library came from ({"cudnn", "/usr/local/cuda/lib64/libcudnn.so.9"}),
  // and its companions that would not load (cuDNN's parts), with the loader's message.
  std::vector<std::pair<std::string, std::string>> library_files;
  std::vector<std::string> library_notes;
  std::vector<GpuInfo> gpus;
  std::string why_none;      // when gpus is empty: the reason, from the failing call
};

// Probed once per process (thread-safe).
const CudaReport& ProbeCuda();

// What an engine built for GPU `device` depends on: name, compute capability, driver, CUDA
// runtime, cuDNN and cuBLAS versions ("cuda:0:unavailable" when the GPU is not usable).
std::string CudaDeviceFingerprint(int device);

}  // namespace kiln::cuda

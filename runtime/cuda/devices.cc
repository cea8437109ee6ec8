#include "runtime/cuda/devices.h"

#include "runtime/cuda/cuda_engine.h"
#include "runtime/cuda/cuda_libs.h"
#include "runtime/cuda/cuda_status.h"

namespace kiln::cuda {
namespace {

std::string ThreePart(size_t v) {
  // cuDNN 9 and cuBLAS number versions major * 10000 + minor * 100 + patch.
  return std::to_string(v / 10000) + "." + std::to_string((v % 10000) / 100) + "." + std::to_string(v % 100);
}

void ProbeGpus(CudaReport& r) {
  int count = 0;
  const absl::Status st = CudaStatus(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (!st.ok()) {
    r.why_none = std::string(st.message());
    return;
  }
  if (count == 0) {
    r.why_none = "cudaGetDeviceCount: no CUDA devices";
    return;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    const absl::Status ps = CudaStatus(cudaGetDeviceProperties(&prop, i), "cudaGetDeviceProperties");
    if (!ps.ok()) {
      r.why_none = std::string(ps.message());
      continue;
    }
    r.gpus.push_back({i, prop.name, prop.major, prop.minor, static_cast<int64_t>(prop.totalGlobalMem),
                      prop.multiProcessorCount});
  }
}

CudaReport Probe() {
  CudaReport r;
  r.compiled = true;
  r.toolkit = CudaVersionString(CUDART_VERSION);
  int v = 0;
  if (cudaRuntimeGetVersion(&v) == cudaSuccess) r.runtime = CudaVersionString(v);
  // 0 (and success) when no driver is installed at all.
  if (cudaDriverGetVersion(&v) == cudaSuccess) r.driver = CudaVersionString(v);
  // The libraries are opened at run time (cuda_libs.h): a missing one is reported, not fatal.
  auto missing = [&r](const absl::Status& st) { r.missing.push_back(std::string(st.message())); };
  if (absl::StatusOr<const NvrtcApi*> rtc = LoadNvrtc(); rtc.ok()) {
    int major = 0, minor = 0;
    if ((*rtc)->nvrtcVersion(&major, &minor) == NVRTC_SUCCESS) r.nvrtc = std::to_string(major) + "." + std::to_string(minor);
  } else {
    missing(rtc.status());
  }
  if (absl::StatusOr<const CudnnApi*> dnn = LoadCudnn(); dnn.ok()) {
    r.cudnn = ThreePart((*dnn)->cudnnGetVersion());
  } else {
    missing(dnn.status());
  }
  if (absl::StatusOr<const CublasLtApi*> lt = LoadCublasLt(); lt.ok()) {
    r.cublas = ThreePart((*lt)->cublasLtGetVersion());
  } else {
    missing(lt.status());
  }
  for (const LibraryOrigin& o : CudaLibraryOrigins()) {
    if (!o.file.empty()) r.library_files.emplace_back(o.name, o.file);
    for (const std::string& n : o.notes) r.library_notes.push_back(o.name + ": " + n);
  }
  ProbeGpus(r);
  return r;
}

}  // namespace

bool CudaCompiledIn() { return true; }

const CudaReport& ProbeCuda() {
  static const CudaReport* r = new CudaReport(Probe());
  return *r;
}

std::string CudaDeviceFingerprint(int device) {
  const CudaReport& r = ProbeCuda();
  for (const GpuInfo& g : r.gpus) {
    if (g.index != device) continue;
    return "cuda:" + std::to_string(device) + ":" + g.name + ";sm_" + std::to_string(g.cc_major) +
           std::to_string(g.cc_minor) + ";driver=" + r.driver + ";runtime=" + r.runtime + ";cudnn=" +
           r.cudnn + ";cublas=" + r.cublas + ";nvrtc=" + r.nvrtc;
  }
  return "cuda:" + std::to_string(device) + ":unavailable";
}

}  // namespace kiln::cuda

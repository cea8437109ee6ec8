// The CUDA backend of a build without the CUDA toolkit: every entry point says so.
#include "runtime/cuda/cuda_engine.h"
#include "runtime/cuda/devices.h"

namespace kiln::cuda {

bool CudaCompiledIn() { return false; }

const CudaReport& ProbeCuda() {
  static const CudaReport* r = [] {
    auto* report = new CudaReport;
    report->why_none = "this build has no CUDA support (the CUDA toolkit was not found when it was configured)";
    return report;
  }();
  return *r;
}

std::string CudaDeviceFingerprint(int device) {
  return "cuda:" + std::to_string(device) + ":not-compiled";
}

absl::StatusOr<std::unique_ptr<runtime::Engine>> BuildCudaEngine(const CompiledGraph&,
                                                                  const CudaEngineOptions& options) {
  return absl::UnimplementedError("cuda:" + std::to_string(options.device) +
                                  ": this binary has no CUDA support (no CUDA toolkit at configure time)");
}

}  // namespace kiln::cuda

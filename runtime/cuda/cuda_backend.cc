#include "runtime/cuda/cuda_backend.h"

#include "compiler/pipeline.h"
#include "runtime/cuda/cuda_engine.h"
#include "runtime/cuda/devices.h"

namespace kiln::cuda {
namespace {

class Cuda final : public runtime::Backend {
 public:
  const char* name() const override { return "cuda"; }
  bool Serves(const std::string& device) const override {
    return ParseCudaDevice(device).has_value();
  }
  // The GPU (name, compute capability) and the driver, CUDA, cuDNN and cuBLAS versions that
  // chose and compiled its kernels.
  std::string Fingerprint(const std::string& device) const override {
    const std::optional<int> gpu = ParseCudaDevice(device);
    return gpu ? CudaDeviceFingerprint(*gpu) : device;
  }
  std::set<std::string> PassesOff() const override { return PassesOffFor("cuda"); }
  // None yet: the engine computes float32 (TF32 only when asked).

  absl::StatusOr<std::unique_ptr<runtime::Engine>> Build(
      const std::string& device, const CompiledGraph& compiled,
      const runtime::BuildOptions& options) const override {
    CudaEngineOptions o;
    o.device = ParseCudaDevice(device).value_or(0);
    o.tf32 = options.tf32;
    // The layout an earlier build settled on (from the engine cache, or the first instance)
    // carries its measured convolution algorithms; "tune" measures.
    o.tuning = options.layout;
    return BuildCudaEngine(compiled, o);
  }
};

}  // namespace

const runtime::Backend& CudaBackend() {
  static const Cuda backend;
  return backend;
}

}  // namespace kiln::cuda

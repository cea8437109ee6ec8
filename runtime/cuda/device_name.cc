// Device names, shared by the build with and without the CUDA toolkit.
#include <string>

#include "runtime/cuda/cuda_engine.h"
#include "runtime/device.h"

namespace kiln::cuda {

std::optional<int> ParseCudaDevice(const std::string& device) {
  const std::optional<runtime::Device> d = runtime::ParseDevice(device);
  if (!d || d->family != runtime::DeviceFamily::kCuda) return std::nullopt;
  return d->index;
}

bool IsStickyCudaError(std::string_view message) {
  // cudaError_t's documentation: these leave the context unusable until the process exits.
  for (const char* name : {"cudaErrorIllegalAddress", "cudaErrorLaunchFailure", "cudaErrorIllegalInstruction",
                           "cudaErrorMisalignedAddress", "cudaErrorInvalidAddressSpace", "cudaErrorInvalidPc",
                           "cudaErrorHardwareStackError", "cudaErrorAssert", "cudaErrorLaunchTimeout",
                           "cudaErrorECCUncorrectable", "cudaErrorTensorMemoryLeak"}) {
    if (message.find(std::string("(") + name + ")") != std::string_view::npos) return true;
  }
  return false;
}

}  // namespace kiln::cuda

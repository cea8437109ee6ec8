// Device names, shared by the build with and without the CUDA toolkit.
#include <cctype>
#include <string>

#include "runtime/cuda/cuda_engine.h"

namespace kiln::cuda {

std::optional<int> ParseCudaDevice(const std::string& device) {
  if (device == "cuda") return 0;
  if (device.rfind("cuda:", 0) != 0 || device.size() == 5 || device.size() > 8) return std::nullopt;
  int n = 0;
  for (size_t i = 5; i < device.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(device[i]))) return std::nullopt;
    n = n * 10 + (device[i] - '0');
  }
  return n;
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

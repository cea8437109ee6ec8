#include "runtime/backend.h"

#include "runtime/cuda/cuda_backend.h"
#include "runtime/reference/reference_engine.h"
#ifdef KILN_HAVE_CPU_ENGINE
#include "runtime/cpu/cpu_backend.h"
#endif

namespace kiln::runtime {

const std::vector<const Backend*>& Backends() {
  static const std::vector<const Backend*> all = {
      &ReferenceBackend(),
#ifdef KILN_HAVE_CPU_ENGINE
      &cpu::CpuBackend(),
#endif
      &cuda::CudaBackend(),
  };
  return all;
}

absl::StatusOr<const Backend*> FindBackend(const std::string& device) {
  for (const Backend* b : Backends()) {
    if (b->Serves(device)) return b;
  }
  return absl::InvalidArgumentError("unknown device '" + device +
                                    "' (devices: reference, cpu, cuda, cuda:N)");
}

}  // namespace kiln::runtime

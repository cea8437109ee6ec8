// The JIT part of the CUDA backend: a module's generated source compiled by NVRTC, to CUBIN
// for the engine's GPU (sm_XY, no driver JIT at load) or to PTX (compute_XY). NVRTC needs no
// device, so tests prove on GPU-less machines that every generated kernel compiles.
// Compiled modules are cached per process by (source, architecture): engine instances and
// batch buckets with the same kernels compile once.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace kiln::cuda {

struct CompiledModule {
  std::string image;  // CUBIN or PTX (NUL-terminated text)
  bool cubin = false;
  double compile_ms = 0.0;
  std::string log;    // NVRTC's log (warnings)
};

// arch: "sm_90" (CUBIN) or "compute_90" (PTX). INTERNAL with NVRTC's log on compile errors.
absl::StatusOr<std::shared_ptr<const CompiledModule>> CompileModule(const std::string& source,
                                                                    const std::string& arch,
                                                                    const std::string& name);

// The options every module is compiled with: IEEE math (no fast-math) and no contraction of
// multiply-adds, the rounding of the host shim that tests the kernels.
std::vector<std::string> NvrtcOptions(const std::string& arch);

// The architectures this NVRTC can target (e.g. 75 80 86 89 90 100 120).
std::vector<int> SupportedArchs();
// The best target for a GPU of compute capability major.minor: its own SM when NVRTC knows
// it, else the newest older one (as PTX, which the driver JIT-compiles forward).
// FAILED_PRECONDITION when NVRTC supports nothing at or below it.
absl::StatusOr<std::string> ArchFor(int major, int minor);

}  // namespace kiln::cuda

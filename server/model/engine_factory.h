// The server's view of the backends (runtime/backend.h) by device string: building an
// engine, the passes kept off, the lower precision, the engine cache's device fingerprint.
#pragma once

#include <memory>
#include <set>
#include <string>

#include "base/status.h"
#include "compiler/compile.h"
#include "runtime/engine.h"

namespace kiln::server {

// The passes that stay off for engines on `device` (compiler/pipeline.h PassesOffFor, with
// this CPU's int8 dot product for "cpu").
std::set<std::string> PassesOffOn(const std::string& device);
// The lower precision `device`'s engines multiply natively (PipelineOptions::precision):
// "bf16" on a CPU with AVX512_BF16 or AMX (at the ISA level in force), else "" (none yet:
// the CUDA engine computes float32, TF32 only when asked).
std::string LowerPrecisionOn(const std::string& device);
// "cpu:" plus a hash of the CPU's ISA flags (/proc/cpuinfo) and the ISA level in force, so an
// engine built for AVX-512 never loads on a machine without it; for a GPU its name, compute
// capability and the driver, CUDA, cuDNN, cuBLAS and NVRTC versions; "reference" itself.
std::string DeviceFingerprint(const std::string& device);

// device: "reference" (the interpreter), "cpu" (oneDNN) or "cuda:N" (GPU N; "cuda" is GPU 0).
// INVALID_ARGUMENT otherwise. cpu_layout (cpu device): "tune", "primitive" or "blocked"; for a
// GPU, an earlier build's EngineInfo::layout (its convolution algorithms) or anything else to
// measure them. cpu_threads: OpenMP threads of the engine (0: all cores); tune_threads: a
// small engine may settle on one thread when that measures faster (runtime/cpu/tune.h).
// warm_up (cpu): run the engine once on zeros at build, so the first request does not pay
// for first-touch page faults and oneDNN's JIT; a caller that runs it at once (the warm-up
// check) may skip it. winograd (cpu): ModelConfig::cpu_winograd.
absl::StatusOr<std::unique_ptr<runtime::Engine>> BuildEngine(
    const std::string& device, const std::string& cpu_layout, int cpu_threads, bool tune_threads,
    const CompiledGraph& compiled, bool warm_up = true, bool winograd = true,
    int cpu_run_threads = 0);

}  // namespace kiln::server

#include "server/engine_factory.h"

#include "compiler/pipeline.h"

#include "runtime/cuda/cuda_engine.h"
#include "runtime/reference/reference_engine.h"
#ifdef KILN_HAVE_CPU_ENGINE
#include "runtime/cpu/cpu_engine.h"
#include "runtime/cpu/isa.h"
#endif

namespace kiln::server {

std::set<std::string> PassesOffOn(const std::string& device) {
#ifdef KILN_HAVE_CPU_ENGINE
  if (device == "cpu") return PassesOffFor(device, cpu::HasInt8DotProduct());
#endif
  return PassesOffFor(device);
}

std::string LowerPrecisionOn(const std::string& device) {
#ifdef KILN_HAVE_CPU_ENGINE
  if (device == "cpu" && cpu::HasBf16DotProduct()) return "bf16";
#endif
  (void)device;
  return "";
}

absl::StatusOr<std::unique_ptr<runtime::Engine>> BuildEngine(const std::string& device,
                                                             const std::string& cpu_layout,
                                                             int cpu_threads, bool tune_threads,
                                                             const CompiledGraph& compiled,
                                                             bool warm_up) {
  if (device == "reference") return runtime::BuildReferenceEngine(compiled);
  if (device == "cpu") {
#ifdef KILN_HAVE_CPU_ENGINE
    cpu::CpuEngineOptions options;
    options.threads = cpu_threads;
    options.tune_threads = tune_threads;
    options.warm_up = warm_up;
    const auto layout = cpu::ParseActivationLayout(cpu_layout);
    if (!layout) return absl::InvalidArgumentError(absl::StrCat("unknown cpu layout '", cpu_layout, "'"));
    options.layout = *layout;
    // Graphs with data-dependent output sizes get a dynamic region (model_builder.cc refuses
    // them where a batch would have to be split into rows).
    options.dynamic_shapes = true;
    return cpu::BuildCpuEngine(compiled, options);
#else
    (void)tune_threads;
    (void)warm_up;
    // HOOK: runtime/ did not build kiln_cpu (the oneDNN engine); see server/CMakeLists.txt.
    return absl::UnimplementedError("the cpu device is not built into this kilnd");
#endif
  }
  if (const std::optional<int> gpu = cuda::ParseCudaDevice(device)) {
    cuda::CudaEngineOptions options;
    options.device = *gpu;
    // The layout an earlier build of this engine settled on (from the engine cache, or the
    // first instance) carries its measured convolution algorithms; "tune" measures.
    options.tuning = cpu_layout;
    // A machine without the GPU (or without CUDA in this build) answers FAILED_PRECONDITION
    // or UNIMPLEMENTED with the reason; the model is then FAILED and the server serves the rest.
    return cuda::BuildCudaEngine(compiled, options);
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown device '", device, "'"));
}

}  // namespace kiln::server

#include "server/engine_factory.h"

#include "runtime/reference/reference_engine.h"
#ifdef KILN_HAVE_CPU_ENGINE
#include "runtime/cpu/cpu_engine.h"
#endif

namespace kiln::server {

absl::StatusOr<std::unique_ptr<runtime::Engine>> BuildEngine(const std::string& device,
                                                             const std::string& cpu_layout,
                                                             const CompiledGraph& compiled) {
  if (device == "reference") return runtime::BuildReferenceEngine(compiled);
  if (device == "cpu") {
#ifdef KILN_HAVE_CPU_ENGINE
    // OpenMP on all cores, right for the common single-instance case (several instances of
    // one model share the cores; a per-instance thread count is future work).
    cpu::CpuEngineOptions options;
    const auto layout = cpu::ParseActivationLayout(cpu_layout);
    if (!layout) return absl::InvalidArgumentError(absl::StrCat("unknown cpu layout '", cpu_layout, "'"));
    options.layout = *layout;
    return cpu::BuildCpuEngine(compiled, options);
#else
    // HOOK: runtime/ did not build kiln_cpu (the oneDNN engine); see server/CMakeLists.txt.
    return absl::UnimplementedError("the cpu device is not built into this kilnd");
#endif
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown device '", device, "'"));
}

}  // namespace kiln::server

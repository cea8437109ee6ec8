#include "runtime/cpu/cpu_backend.h"

// Header-only XXH3 (libxxhash-dev), inlined: the fingerprint adds no shared library.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstdio>
#include <fstream>

#include "compiler/pipeline.h"
#include "runtime/cpu/cpu_engine.h"
#include "runtime/cpu/isa.h"
#include "runtime/device.h"

namespace kiln::cpu {
namespace {

class Cpu final : public runtime::Backend {
 public:
  const char* name() const override { return "cpu"; }
  bool Serves(const std::string& device) const override {
    const std::optional<runtime::Device> d = runtime::ParseDevice(device);
    return d && d->family == runtime::DeviceFamily::kCpu;
  }

  // oneDNN dispatches on the CPU's flags at primitive creation and prepacked layouts depend on
  // them (the model name is not enough: VMs mask flags); a KILN_MAX_CPU_ISA cap changes
  // layouts and kernels on the same flags.
  std::string Fingerprint(const std::string&) const override {
    std::ifstream in("/proc/cpuinfo");
    std::string line, flags = "unknown";
    while (std::getline(in, line)) {
      if (line.rfind("flags", 0) == 0) {
        const XXH128_hash_t h = XXH3_128bits(line.data(), line.size());
        char hex[17];
        std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h.high64));
        flags = hex;
        break;
      }
    }
    return std::string("cpu:") + flags + ":isa=" + IsaName(ActiveIsa()) + "/" + CpuIsa().onednn;
  }

  std::set<std::string> PassesOff() const override {
    return PassesOffFor("cpu", HasInt8DotProduct());
  }
  std::string LowerPrecision() const override { return HasBf16DotProduct() ? "bf16" : ""; }

  absl::StatusOr<std::unique_ptr<runtime::Engine>> Build(
      const std::string&, const CompiledGraph& compiled,
      const runtime::BuildOptions& options) const override {
    CpuEngineOptions o;
    o.threads = options.threads;
    o.tune_threads = options.tune_threads;
    o.warm_up = options.warm_up;
    o.dynamic_shapes = options.dynamic_shapes;
    const std::optional<ActivationLayout> layout = ParseActivationLayout(options.layout);
    if (!layout) return absl::InvalidArgumentError("unknown cpu layout '" + options.layout + "'");
    o.layout = *layout;
    return BuildCpuEngine(compiled, o);
  }
};

}  // namespace

const runtime::Backend& CpuBackend() {
  static const Cpu backend;
  return backend;
}

}  // namespace kiln::cpu

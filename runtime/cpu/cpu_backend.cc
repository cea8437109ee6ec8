#include "runtime/cpu/cpu_backend.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "base/content_hash.h"
#include "compiler/pipeline.h"
#include "runtime/cpu/cpu_engine.h"
#include "runtime/cpu/isa.h"
#include "runtime/device.h"

namespace kiln::cpu {
namespace {

// KILN_CPU_WINOGRAD=off (or 0): direct convolutions only; =heuristic: Winograd only where
// oneDNN's heuristic picks it, none timed at build. For A/Bs (CpuEngineOptions::winograd,
// winograd_trial_ms).
std::string WinogradMode() {
  const char* v = std::getenv("KILN_CPU_WINOGRAD");
  return v ? std::string(v) : "";
}

// The first 64 bits of the hash of /proc/cpuinfo's flags line, in hex; "unknown" without one.
std::string FlagsHash() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) == 0) return ContentHash(line).substr(0, 16);
  }
  return "unknown";
}

class Cpu final : public runtime::Backend {
 public:
  const char* name() const override { return "cpu"; }
  bool Serves(const std::string& device) const override {
    const std::optional<runtime::Device> d = runtime::ParseDevice(device);
    return d && d->family == runtime::DeviceFamily::kCpu;
  }

  // oneDNN dispatches on the CPU's flags at primitive creation and prepacked layouts depend on
  // them (the model name is not enough: VMs mask flags); a KILN_MAX_CPU_ISA cap changes
  // layouts and kernels on the same flags. The flags are read once per process (every
  // bucket's cache key asks); the level in force is asked each time (tests lower it).
  std::string Fingerprint(const std::string&) const override {
    static const std::string flags = FlagsHash();
    return "cpu:" + flags + ":isa=" + IsaName(ActiveIsa()) + "/" + CpuIsa().onednn;
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
    o.run_threads = options.run_threads;
    o.tune_threads = options.tune_threads;
    o.warm_up = options.warm_up;
    o.dynamic_shapes = options.dynamic_shapes;
    const std::optional<ActivationLayout> layout = ParseActivationLayout(options.layout);
    if (!layout) return absl::InvalidArgumentError("unknown cpu layout '" + options.layout + "'");
    o.layout = *layout;
    const std::string winograd = WinogradMode();
    o.winograd = options.winograd && winograd != "off" && winograd != "0";
    if (winograd == "heuristic") o.winograd_trial_ms = 0;
    return BuildCpuEngine(compiled, o);
  }
};

}  // namespace

const runtime::Backend& CpuBackend() {
  static const Cpu backend;
  return backend;
}

}  // namespace kiln::cpu

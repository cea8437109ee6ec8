#include "runtime/cuda/nvrtc_compiler.h"

#include <chrono>
#include <map>
#include <mutex>

#include "runtime/cuda/cuda_libs.h"
#include "runtime/cuda/cuda_status.h"

namespace kiln::cuda {
namespace {

struct ProgramDeleter {
  void operator()(nvrtcProgram p) const { Rtc().nvrtcDestroyProgram(&p); }
};

std::string Log(nvrtcProgram prog) {
  size_t n = 0;
  if (Rtc().nvrtcGetProgramLogSize(prog, &n) != NVRTC_SUCCESS || n <= 1) return "";
  std::string log(n, '\0');
  if (Rtc().nvrtcGetProgramLog(prog, log.data()) != NVRTC_SUCCESS) return "";
  log.resize(n - 1);
  return log;
}

absl::StatusOr<std::string> Image(nvrtcProgram prog, bool cubin) {
  size_t n = 0;
  std::string out;
  if (cubin) {
    KILN_NVRTC(Rtc().nvrtcGetCUBINSize(prog, &n));
    out.resize(n);
    KILN_NVRTC(Rtc().nvrtcGetCUBIN(prog, out.data()));
  } else {
    KILN_NVRTC(Rtc().nvrtcGetPTXSize(prog, &n));
    out.resize(n);
    KILN_NVRTC(Rtc().nvrtcGetPTX(prog, out.data()));
  }
  return out;
}

absl::StatusOr<CompiledModule> Compile(const std::string& source, const std::string& arch,
                                       const std::string& name) {
  const auto t0 = std::chrono::steady_clock::now();
  nvrtcProgram raw = nullptr;
  KILN_NVRTC(Rtc().nvrtcCreateProgram(&raw, source.c_str(), (name + ".cu").c_str(), 0, nullptr, nullptr));
  std::unique_ptr<_nvrtcProgram, ProgramDeleter> prog(raw);
  const std::vector<std::string> options = NvrtcOptions(arch);
  std::vector<const char*> opts;
  for (const std::string& o : options) opts.push_back(o.c_str());
  const nvrtcResult r = Rtc().nvrtcCompileProgram(raw, static_cast<int>(opts.size()), opts.data());
  CompiledModule m;
  m.log = Log(raw);
  if (r != NVRTC_SUCCESS) {
    return absl::InternalError("NVRTC could not compile " + name + " for " + arch + ": " +
                               Rtc().nvrtcGetErrorString(r) + "\n" + m.log);
  }
  m.cubin = arch.rfind("sm_", 0) == 0;
  ASSIGN_OR_RETURN(m.image, Image(raw, m.cubin));
  m.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

}  // namespace

std::vector<std::string> NvrtcOptions(const std::string& arch) {
  // No fast-math: expf, erff, division and sqrt stay IEEE-accurate, as the reference is.
  // --fmad=false: NVRTC contracts a * b + c into one rounding by default, while the host
  // shim that checks these kernels compiles them with -ffp-contract=off; both now round
  // every operation, so what the host tests proved is what the GPU computes.
  return {"--gpu-architecture=" + arch, "-std=c++17", "--device-as-default-execution-space", "--fmad=false"};
}

absl::StatusOr<std::shared_ptr<const CompiledModule>> CompileModule(const std::string& source,
                                                                    const std::string& arch,
                                                                    const std::string& name) {
  RETURN_IF_ERROR(LoadNvrtc().status());
  static std::mutex mu;
  static auto* cache = new std::map<std::pair<std::string, std::string>, std::shared_ptr<const CompiledModule>>;
  const auto key = std::make_pair(arch, source);
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache->find(key);
    if (it != cache->end()) return it->second;
  }
  // Compiled outside the lock: two first builds of one module may both compile it; the
  // results are identical.
  ASSIGN_OR_RETURN(CompiledModule m, Compile(source, arch, name));
  auto shared = std::make_shared<const CompiledModule>(std::move(m));
  std::lock_guard<std::mutex> lock(mu);
  return cache->emplace(key, shared).first->second;
}

std::vector<int> SupportedArchs() {
  if (!LoadNvrtc().ok()) return {};
  int n = 0;
  if (Rtc().nvrtcGetNumSupportedArchs(&n) != NVRTC_SUCCESS || n <= 0) return {};
  std::vector<int> archs(static_cast<size_t>(n));
  if (Rtc().nvrtcGetSupportedArchs(archs.data()) != NVRTC_SUCCESS) return {};
  return archs;
}

absl::StatusOr<std::string> ArchFor(int major, int minor) {
  RETURN_IF_ERROR(LoadNvrtc().status());
  const int want = major * 10 + minor;
  int best = -1;
  for (int a : SupportedArchs()) {
    if (a <= want && a > best) best = a;
  }
  if (best < 0) {
    return absl::FailedPreconditionError("NVRTC cannot target compute capability " +
                                         std::to_string(major) + "." + std::to_string(minor));
  }
  return (best == want ? "sm_" : "compute_") + std::to_string(best);
}

}  // namespace kiln::cuda

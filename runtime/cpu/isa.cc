#include "runtime/cpu/isa.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>

#include "oneapi/dnnl/dnnl.hpp"

namespace kiln::cpu {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// AVX-512 counts only with the subset oneDNN calls avx512_core (F, BW, VL, DQ): the own
// kernels need F alone, but the two must run at one level. __builtin_cpu_supports also checks
// that the OS saves the wider registers (XGETBV).
Isa Detect() {
#if defined(__GNUC__) && defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
    return Isa::kAvx512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::kAvx2;
#endif
  return Isa::kBaseline;
}

struct OneDnnName {
  const char* name;
  dnnl::cpu_isa isa;
};
constexpr OneDnnName kOneDnnNames[] = {
    {"all", dnnl::cpu_isa::all},
    {"sse41", dnnl::cpu_isa::sse41},
    {"avx", dnnl::cpu_isa::avx},
    {"avx2", dnnl::cpu_isa::avx2},
    {"avx2_vnni", dnnl::cpu_isa::avx2_vnni},
    {"avx512_core", dnnl::cpu_isa::avx512_core},
    {"avx512_core_vnni", dnnl::cpu_isa::avx512_core_vnni},
    {"avx512_core_bf16", dnnl::cpu_isa::avx512_core_bf16},
    {"avx512_core_amx", dnnl::cpu_isa::avx512_core_amx},
    {"avx512_mic", dnnl::cpu_isa::avx512_mic},
    {"avx512_mic_4ops", dnnl::cpu_isa::avx512_mic_4ops},
};

const char* OneDnnIsaName(dnnl::cpu_isa isa) {
  for (const auto& n : kOneDnnNames) {
    if (n.isa == isa) return n.name;
  }
  return "unknown";
}

// oneDNN's ISA values are bit sets: 0x20 marks the avx512_core family, 0x4 AVX2.
Isa LevelOf(dnnl::cpu_isa isa) {
  const unsigned bits = static_cast<unsigned>(isa);
  if (isa == dnnl::cpu_isa::all) return Isa::kAvx512;
  if (bits & 0x20u) return Isa::kAvx512;
  if (bits & 0x4u) return Isa::kAvx2;
  return Isa::kBaseline;
}

// The oneDNN cap that KILN_MAX_CPU_ISA stands for: its own spelling when it is one of
// oneDNN's names, else Kiln's level.
dnnl::cpu_isa OneDnnCap(const std::string& lowered, Isa level) {
  for (const auto& n : kOneDnnNames) {
    if (lowered == n.name) return n.isa;
  }
  switch (level) {
    case Isa::kAvx512: return dnnl::cpu_isa::all;
    case Isa::kAvx2: return dnnl::cpu_isa::avx2;
    default: return dnnl::cpu_isa::sse41;
  }
}

const char* Env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

IsaReport Decide() {
  IsaReport r;
  r.detected = Detect();
  Isa cap = Isa::kAvx512;
  if (const char* k = Env("KILN_MAX_CPU_ISA")) {
    std::optional<Isa> parsed = ParseIsa(k);
    if (!parsed) {
      std::fprintf(stderr, "kiln: ignoring KILN_MAX_CPU_ISA=%s (avx512, avx2 or baseline)\n", k);
    } else {
      cap = *parsed;
      r.cap = std::string(k) + " (KILN_MAX_CPU_ISA)";
      if (dnnl::set_max_cpu_isa(OneDnnCap(Lower(k), cap)) != dnnl::status::success) {
        std::fprintf(stderr, "kiln: oneDNN was already in use; its ISA is not capped\n");
      }
    }
  } else if (const char* d = Env("ONEDNN_MAX_CPU_ISA") ? Env("ONEDNN_MAX_CPU_ISA")
                                                        : Env("DNNL_MAX_CPU_ISA")) {
    r.cap = std::string(d) + " (oneDNN's variable)";
  }
  const dnnl::cpu_isa effective = dnnl::get_effective_cpu_isa();
  r.onednn = OneDnnIsaName(effective);
  r.active = std::min({r.detected, cap, LevelOf(effective)});
  r.channel_block = LevelOf(effective) == Isa::kAvx512 ? 16 : 8;
  return r;
}

struct State {
  IsaReport report = Decide();
  std::atomic<Isa> active{report.active};
};

State& GetState() {
  static State state;
  return state;
}

}  // namespace

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx2: return "avx2";
    case Isa::kBaseline: return "baseline";
  }
  return "baseline";
}

std::optional<Isa> ParseIsa(std::string_view name) {
  const std::string s = Lower(name);
  if (s == "avx512" || s == "all" || s == "default" || s.rfind("avx512_core", 0) == 0) {
    return Isa::kAvx512;
  }
  if (s == "avx2" || s == "avx2_vnni") return Isa::kAvx2;
  if (s == "baseline" || s == "sse41" || s == "avx" || s == "x86-64") return Isa::kBaseline;
  return std::nullopt;
}

const IsaReport& CpuIsa() { return GetState().report; }

Isa ActiveIsa() { return GetState().active.load(std::memory_order_relaxed); }

Isa SetActiveIsaForTesting(Isa isa) {
  State& s = GetState();
  return s.active.exchange(std::min(isa, s.report.detected));
}

bool HasInt8DotProduct() {
  const std::string& isa = CpuIsa().onednn;
  return isa.find("vnni") != std::string::npos ||
         (isa.rfind("avx512_core_", 0) == 0 && isa != "avx512_core");
}

bool HasBf16DotProduct() {
  const std::string& isa = CpuIsa().onednn;
  for (const char* level : {"bf16", "amx", "fp16"}) {  // avx512_core_fp16 includes AVX512_BF16
    if (isa.find(level) != std::string::npos) return true;
  }
  return false;
}

}  // namespace kiln::cpu

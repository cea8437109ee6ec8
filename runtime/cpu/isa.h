// The vector ISA the CPU engine runs at, one level for oneDNN and for Kiln's own kernels.
//
// Kiln runs on whatever x86-64 CPU it lands on, and a test machine must be able to prove the
// lower levels too. So the level is: what the CPU has (CPUID, with the OS saving the wider
// registers), capped by KILN_MAX_CPU_ISA when set (avx512 | avx2 | baseline; also oneDNN's
// spellings: AVX512_CORE, AVX2, SSE41, ALL ...), which Kiln passes on to oneDNN before its
// first primitive. When only oneDNN's own cap (ONEDNN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA) is set,
// the own kernels follow what oneDNN then dispatches, so the two never disagree.
//
// Dependency-light on purpose (no oneDNN here): the server and tools read it for reports.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace kiln::cpu {

// Ordered: a higher level includes the lower ones.
enum class Isa { kBaseline = 0, kAvx2 = 1, kAvx512 = 2 };

const char* IsaName(Isa isa);  // "baseline", "avx2", "avx512"
// Kiln's names and oneDNN's (case-insensitive); "all"/"default" is the highest level.
std::optional<Isa> ParseIsa(std::string_view name);

struct IsaReport {
  Isa detected = Isa::kBaseline;  // what the CPU (and OS) offer
  std::string cap;                // the cap in force ("" when none) and where it came from
  Isa active = Isa::kBaseline;    // what the own kernels run
  std::string onednn;             // oneDNN's effective ISA ("avx2", "avx512_core_bf16", ...)
  int channel_block = 8;          // the blocked layout's channel block for that ISA
};

// Decided once per process (the first call applies the cap to oneDNN). Thread-safe.
const IsaReport& CpuIsa();
// Whether oneDNN's int8 kernels at that level multiply with a 32-bit dot product (VNNI: every
// avx512_core_* level above plain avx512_core, avx2_vnni); without it they pair products in
// saturating 16-bit sums (runtime/cpu/qlinear.h).
bool HasInt8DotProduct();
// Whether oneDNN's kernels at that level multiply bf16 operands natively (AVX512_BF16 or AMX):
// where a product computed in bf16 is faster than in float32, not emulated.
bool HasBf16DotProduct();
// The level the own kernels dispatch to: CpuIsa().active unless a test lowered it.
Isa ActiveIsa();

// Test hook: the level the own kernels dispatch to from now on, clamped to the detected
// level; returns the previous one. oneDNN's level is not changed (it cannot be, once set).
Isa SetActiveIsaForTesting(Isa isa);

}  // namespace kiln::cpu

// Hot loops of the own kernels are compiled once per level from one always-inline body, and a
// dispatcher picks the version for ActiveIsa() (not the loader's choice, as GCC's
// target_clones would: the cap must reach them). GCC contracts a * b + c into an FMA in C++
// wherever the target has one, so the AVX2 and AVX-512 versions may differ from the baseline
// one in the last bits (as reductions do, whose lanes reassociate); tests compare them with
// tolerances. The reference interpreter's product, which must not differ, is built without
// contraction (ops/gemm_f64.h).
//
//   KILN_ISA_BODY void FooBody(const float* x, int64_t n) { ... }
//   KILN_ISA_VERSIONS(void, Foo, (const float* x, int64_t n), (x, n))
//
// defines Foo(x, n) with Foo_avx512, Foo_avx2 and Foo_baseline behind it.
#define KILN_ISA_BODY [[gnu::always_inline]] inline
#if defined(__GNUC__) && defined(__x86_64__)
#define KILN_ISA_VERSIONS(ret, name, params, args)                                    \
  [[gnu::target("avx512f")]] ret name##_avx512 params { return name##Body args; }  \
  [[gnu::target("avx2")]] ret name##_avx2 params { return name##Body args; }       \
  ret name##_baseline params { return name##Body args; }                           \
  ret name params {                                                                \
    switch (::kiln::cpu::ActiveIsa()) {                                            \
      case ::kiln::cpu::Isa::kAvx512: return name##_avx512 args;                   \
      case ::kiln::cpu::Isa::kAvx2: return name##_avx2 args;                       \
      default: return name##_baseline args;                                        \
    }                                                                              \
  }
#else
#define KILN_ISA_VERSIONS(ret, name, params, args) \
  ret name params { return name##Body args; }
#endif

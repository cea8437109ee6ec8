// Transparent huge pages for the heap (glibc's glibc.malloc.hugetlb=1 tunable).
//
// Why: on this project's VMs a first touch of a fresh 4 KB page costs ~14 us, so filling a
// new 100 MB buffer costs ~370 ms in page faults alone, and in 2 MB pages ~9 ms. Loading a
// model is mostly that: ResNet-50's engines prepack ~100 MB of weights per batch bucket into
// oneDNN's buffers, and the import copies the model's weights. With the kernel's THP mode at
// "madvise" (Debian's default) only memory that asks gets huge pages; the tunable makes
// glibc's malloc ask, for every library in the process (oneDNN, protobuf, Kiln). Measured on
// a warm ResNet-50 load in kilnd: 183k -> 96k minor faults, 4.4 -> 3.5 s of CPU.
//
// Why it is opt-in (KILN_HUGE_PAGES=1) since 2026-12-02: serving pays for it. BERT-base at
// sequence 128 in kilnd, KServe REST, 8 requests 500 ms apart, 4 alternating runs: with the
// tunable 140-438 ms per request (and 200-270 ms spikes back to back), without it 101-152 ms
// (79-129 back to back; the engine alone after the same idle: 115 ms). Huge pages of the
// request path's buffers are released and faulted (2 MB zeroed) again request after request,
// and idle regions are split and collapsed by the kernel's memory management between requests.
// Raising glibc's mmap and trim thresholds with it did not help (153-438 ms). A load-heavy
// deployment (many large models, few requests) may still opt in.
//
// glibc reads tunables once, at start, so the process re-executes itself with the variable
// set (base/openmp_env.h's ReexecSelf). A GLIBC_TUNABLES that names the tunable already is
// respected, and nothing is changed where THP is "always" (no need) or "never" (no use).
#pragma once

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <string>

#include "base/aligned.h"

namespace kiln {

inline constexpr const char kHugePageTunable[] = "glibc.malloc.hugetlb";

// The GLIBC_TUNABLES value to run with, given the current one (null: unset) and the kernel's
// THP setting (the text of /sys/kernel/mm/transparent_hugepage/enabled); nullopt: leave it.
inline std::optional<std::string> HugePageTunables(const char* current,
                                                   const std::string& thp_enabled) {
  if (thp_enabled.find("[madvise]") == std::string::npos) return std::nullopt;
  const std::string now = current ? current : "";
  if (now.find(kHugePageTunable) != std::string::npos) return std::nullopt;
  const std::string add = std::string(kHugePageTunable) + "=1";
  return now.empty() ? add : now + ":" + add;
}

// With KILN_HUGE_PAGES=1, sets GLIBC_TUNABLES in this process's environment when
// HugePageTunables says so; true when it changed (the process must then re-execute for glibc
// to see it). Anything else leaves the environment alone.
inline bool SetHugePageMalloc() {
  const char* opt = std::getenv("KILN_HUGE_PAGES");
  if (opt == nullptr || std::string(opt) != "1") return false;
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string thp;
  std::getline(in, thp);
  const std::optional<std::string> value = HugePageTunables(std::getenv("GLIBC_TUNABLES"), thp);
  return value && setenv("GLIBC_TUNABLES", value->c_str(), 1) == 0;
}

// A long-lived multi-MiB buffer (a kv cache, a generation step's tensors) on transparent huge
// pages where the kernel allows them ("madvise" or "always"): its first touch faults 2 MB at
// a time instead of 4 KB, and reads over it miss the TLB less. 16 generation streams of a
// 4-layer hidden-256 decoder write ~24 MB of fresh cache pages per burst: ~6000 faults at
// ~14 us on this project's VMs. A buffer under kHugePageFrom is allocated as it is asked (a
// whole huge page would waste most of it). Not zeroed. Null when the memory is not there.
inline constexpr size_t kHugePageBytes = size_t{2} << 20;
inline constexpr size_t kHugePageFrom = size_t{1} << 20;

// Frees an AllocateHugePageBacked buffer: unmaps a mapped one (`bytes` from kHugePageFrom),
// frees a small one.
struct HugePageDeleter {
  size_t bytes = 0;
  void operator()(char* p) const {
    if (bytes >= kHugePageFrom) {
      munmap(p, bytes);
    } else {
      std::free(p);
    }
  }
};
using HugePageBuffer = std::unique_ptr<char, HugePageDeleter>;

// The bytes AllocateHugePageBacked takes for `bytes`: whole huge pages from kHugePageFrom.
inline size_t HugePageRound(size_t bytes) {
  if (bytes < kHugePageFrom) return bytes;
  return (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
}

// A buffer from kHugePageFrom is mapped on its own, aligned to a huge page, not taken from
// malloc: advice given to a range of malloc's heap (where glibc serves even multi-MiB blocks
// while a model loads, base/heap_scope.h) would stay on it after the free, and the heap's
// small request buffers would then fault 2 MB at a time.
inline HugePageBuffer AllocateHugePageBacked(size_t bytes) {
  const size_t size = HugePageRound(bytes);
  if (size < kHugePageFrom) {
    return HugePageBuffer(NewAlignedBuffer<char>(size).release(), HugePageDeleter{0});
  }
  const size_t span = size + kHugePageBytes;  // room to align the start
  void* mapped = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) return HugePageBuffer(nullptr, HugePageDeleter{0});
  const auto start = reinterpret_cast<uintptr_t>(mapped);
  const uintptr_t aligned = (start + kHugePageBytes - 1) & ~(uintptr_t{kHugePageBytes} - 1);
  if (aligned > start) munmap(mapped, aligned - start);
  const size_t tail = span - (aligned - start) - size;
  if (tail > 0) munmap(reinterpret_cast<void*>(aligned + size), tail);
  madvise(reinterpret_cast<void*>(aligned), size, MADV_HUGEPAGE);  // refused where THP is off
  return HugePageBuffer(reinterpret_cast<char*>(aligned), HugePageDeleter{size});
}

}  // namespace kiln

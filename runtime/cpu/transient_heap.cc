// See transient_heap.h. Everything here must be usable from `operator new` before main and
// from any thread: constant-initialized globals only, no allocation, no locks on the
// allocate/free paths (one mutex guards claiming and returning slots at engine build/teardown).
#include "runtime/cpu/transient_heap.h"

#include <sys/mman.h>

#include <cstdlib>
#include <mutex>
#include <new>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define KILN_TRANSIENT_HEAP_ENABLED 0
#else
#define KILN_TRANSIENT_HEAP_ENABLED 1
#endif

namespace kiln::cpu {
namespace {

// 2,048 slots of 64 KiB: 128 MiB of address space reserved once, with no swap reservation;
// only the pages a slot actually touches (typically one or two) become resident.
constexpr int kSlots = 2048;
constexpr uintptr_t kRegionBytes = uintptr_t{kSlots} * TransientHeap::kSlotBytes;
constexpr size_t kAlign = __STDCPP_DEFAULT_NEW_ALIGNMENT__;

struct SlotState {
  std::atomic<int64_t> live{0};  // blocks handed out and not yet freed
  size_t used = 0;               // bump offset; only the owning scope's thread touches it
};

std::atomic<uintptr_t> g_base{0};
SlotState g_slots[kSlots];
std::mutex g_claim_mu;
int g_free[kSlots];  // stack of unclaimed slot indices (valid after the region is mapped)
int g_free_count = 0;

thread_local TransientHeap* t_current = nullptr;

// Under g_claim_mu. Maps the region on first use; false if the kernel refuses.
bool EnsureRegion() {
  if (g_base.load(std::memory_order_relaxed) != 0) return true;
  void* p = mmap(nullptr, kRegionBytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return false;
  for (int i = 0; i < kSlots; ++i) g_free[i] = kSlots - 1 - i;
  g_free_count = kSlots;
  g_base.store(reinterpret_cast<uintptr_t>(p), std::memory_order_release);
  return true;
}

}  // namespace

TransientHeap::TransientHeap() {
  if (!KILN_TRANSIENT_HEAP_ENABLED) return;
  std::lock_guard<std::mutex> lock(g_claim_mu);
  if (!EnsureRegion() || g_free_count == 0) return;
  slot_ = g_free[--g_free_count];
  g_slots[slot_].used = 0;
}

TransientHeap::~TransientHeap() {
  if (slot_ < 0) return;
  // A slot with blocks still out (a library kept one past Run) is never handed out again:
  // its bytes stay valid for whoever holds them.
  if (g_slots[slot_].live.load(std::memory_order_acquire) != 0) return;
  std::lock_guard<std::mutex> lock(g_claim_mu);
  g_free[g_free_count++] = slot_;
}

void* TransientHeap::Allocate(size_t bytes) {
  if (slot_ < 0) {
    ++overflowed_;
    return nullptr;
  }
  SlotState& s = g_slots[slot_];
  // Every earlier block is back (possibly freed on another thread: acquire pairs with its
  // release), so the slot can be reused from the start.
  if (s.live.load(std::memory_order_acquire) == 0) s.used = 0;
  const size_t need = (bytes + kAlign - 1) / kAlign * kAlign;
  if (need == 0 || need > kSlotBytes - s.used) {
    ++overflowed_;
    return nullptr;
  }
  char* base = reinterpret_cast<char*>(g_base.load(std::memory_order_relaxed));
  void* p = base + static_cast<size_t>(slot_) * kSlotBytes + s.used;
  s.used += need;
  s.live.fetch_add(1, std::memory_order_relaxed);
  ++served_;
  return p;
}

bool TransientHeap::Owns(const void* p) {
  const uintptr_t base = g_base.load(std::memory_order_relaxed);
  return base != 0 && reinterpret_cast<uintptr_t>(p) - base < kRegionBytes;
}

void TransientHeap::Release(void* p) {
  const uintptr_t offset = reinterpret_cast<uintptr_t>(p) - g_base.load(std::memory_order_relaxed);
  g_slots[offset / kSlotBytes].live.fetch_sub(1, std::memory_order_acq_rel);
}

TransientHeap* TransientHeap::Current() { return t_current; }

TransientHeap::Scope::Scope(TransientHeap& heap) : previous_(t_current) { t_current = &heap; }
TransientHeap::Scope::~Scope() { t_current = previous_; }

TransientHeap::Suspend::Suspend() : previous_(t_current) { t_current = nullptr; }
TransientHeap::Suspend::~Suspend() { t_current = previous_; }

}  // namespace kiln::cpu

#if KILN_TRANSIENT_HEAP_ENABLED
// The replaceable global allocation functions ([new.delete.single], [new.delete.array]).
// The nothrow and array forms of libstdc++ forward to these two.
void* operator new(std::size_t n) {
  if (kiln::cpu::TransientHeap* heap = kiln::cpu::TransientHeap::Current()) {
    if (void* p = heap->Allocate(n)) return p;
  }
  for (;;) {
    if (void* p = std::malloc(n ? n : 1)) return p;
    std::new_handler handler = std::get_new_handler();
    if (!handler) throw std::bad_alloc();
    handler();
  }
}

void operator delete(void* p) noexcept {
  if (kiln::cpu::TransientHeap::Owns(p)) {
    kiln::cpu::TransientHeap::Release(p);
  } else {
    std::free(p);
  }
}

void operator delete(void* p, std::size_t) noexcept { ::operator delete(p); }
void* operator new[](std::size_t n) { return ::operator new(n); }
void operator delete[](void* p) noexcept { ::operator delete(p); }
void operator delete[](void* p, std::size_t) noexcept { ::operator delete(p); }
#endif

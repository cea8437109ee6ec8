// A per-engine pool for the short-lived heap blocks that libraries allocate inside Run.
//
// Kiln's own kernels allocate nothing per inference, but oneDNN 2.6's primitive execute turns
// its argument array into a hash map (and a few other small objects) on every call, through
// `operator new`. While a TransientHeap::Scope is open on a thread, that thread's
// `operator new` is served from the engine's pool instead of the process heap: a bump pointer
// in a fixed slot of one address range reserved once per process. `operator delete` knows a
// pool block by its address alone (one range compare), so blocks may be freed from any thread.
//
// Safety does not depend on the libraries' behaviour: the bump pointer returns to the slot's
// start only when every block handed out from it has been freed (a live count), so a block
// that outlives its Run just keeps its bytes. A request that does not fit goes to the process
// heap as usual (counted in `overflowed`), never fails.
//
// This file replaces the global `operator new`/`operator delete` of every binary that links
// the CPU engine (except sanitizer builds, whose allocator must see every block). Outside a
// scope the replacement is malloc/free plus one thread-local load.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace kiln::cpu {

class TransientHeap {
 public:
  static constexpr size_t kSlotBytes = size_t{256} << 10;  // per engine instance

  // Claims a slot; when all are taken (or under a sanitizer) the heap is inert and scopes
  // route nothing.
  TransientHeap();
  ~TransientHeap();
  TransientHeap(const TransientHeap&) = delete;
  TransientHeap& operator=(const TransientHeap&) = delete;

  bool active() const { return slot_ >= 0; }
  uint64_t served() const { return served_; }
  uint64_t overflowed() const { return overflowed_; }

  // Routes this thread's `operator new` into `heap` until destroyed (restores the previous).
  class Scope {
   public:
    explicit Scope(TransientHeap& heap);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    TransientHeap* previous_;
  };

  // Sends this thread's `operator new` back to the process heap until destroyed: for
  // objects made inside Run that live on after it (a kernel's lazily built slow path), which
  // would otherwise pin the pool's slot.
  class Suspend {
   public:
    Suspend();
    ~Suspend();
    Suspend(const Suspend&) = delete;
    Suspend& operator=(const Suspend&) = delete;

   private:
    TransientHeap* previous_;
  };

  // nullptr when the request does not fit (the caller then uses the process heap).
  void* Allocate(size_t bytes);
  // Whether `p` lies in the reserved range; Release is only valid for such pointers.
  static bool Owns(const void* p);
  static void Release(void* p);
  static TransientHeap* Current();

 private:
  int slot_ = -1;
  uint64_t served_ = 0, overflowed_ = 0;  // touched by the scope's thread only
};

}  // namespace kiln::cpu

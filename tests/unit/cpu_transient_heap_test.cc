// The CPU engine's transient heap (runtime/cpu/transient_heap.h): what a scope routes into
// the pool, when the pool is reused, and what falls through to the process heap.
#include "runtime/cpu/transient_heap.h"

#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace kiln::cpu {
namespace {

// A heap allocation the optimizer cannot remove or move (it must reach operator new).
void* NewBlock(size_t n) { return ::operator new(n); }
void DeleteBlock(void* p) { ::operator delete(p); }

TEST(TransientHeap, OutsideAScopeNewUsesTheProcessHeap) {
  TransientHeap heap;
  ASSERT_TRUE(heap.active());
  void* p = NewBlock(64);
  EXPECT_FALSE(TransientHeap::Owns(p));
  DeleteBlock(p);
  EXPECT_EQ(heap.served(), 0u);
  EXPECT_EQ(TransientHeap::Current(), nullptr);
}

TEST(TransientHeap, ScopeServesNewAndReusesTheSlotOnceEverythingIsBack) {
  TransientHeap heap;
  void* first = nullptr;
  {
    TransientHeap::Scope scope(heap);
    first = NewBlock(100);
    void* second = NewBlock(24);
    EXPECT_TRUE(TransientHeap::Owns(first));
    EXPECT_TRUE(TransientHeap::Owns(second));
    EXPECT_GE(static_cast<char*>(second) - static_cast<char*>(first), 100);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(second) % __STDCPP_DEFAULT_NEW_ALIGNMENT__, 0u);
    DeleteBlock(first);
    DeleteBlock(second);
  }
  EXPECT_EQ(TransientHeap::Current(), nullptr);
  TransientHeap::Scope scope(heap);
  void* again = NewBlock(8);
  EXPECT_EQ(again, first);  // every block was freed: the bump pointer went back to the start
  DeleteBlock(again);
  EXPECT_EQ(heap.served(), 3u);
  EXPECT_EQ(heap.overflowed(), 0u);
}

TEST(TransientHeap, AnOutstandingBlockIsNeverHandedOutAgain) {
  TransientHeap heap;
  TransientHeap::Scope scope(heap);
  char* kept = static_cast<char*>(NewBlock(256));
  kept[0] = 'k';
  kept[255] = 'k';
  for (int i = 0; i < 100; ++i) {
    char* p = static_cast<char*>(NewBlock(256));
    EXPECT_TRUE(p >= kept + 256 || p + 256 <= kept) << "overlaps the kept block";
    p[0] = p[255] = 'x';
    DeleteBlock(p);
  }
  EXPECT_EQ(kept[0], 'k');
  EXPECT_EQ(kept[255], 'k');
  DeleteBlock(kept);
}

TEST(TransientHeap, BlocksFreedOnAnotherThreadAreCounted) {
  TransientHeap heap;
  TransientHeap::Scope scope(heap);
  void* p = NewBlock(32);
  std::thread([p] { DeleteBlock(p); }).join();
  EXPECT_EQ(NewBlock(32), p);  // reused: the other thread's free returned it
  DeleteBlock(p);
}

TEST(TransientHeap, TooLargeARequestFallsThroughToTheProcessHeap) {
  TransientHeap heap;
  std::vector<void*> held;  // its own buffer must not come from the pool
  held.reserve(TransientHeap::kSlotBytes / 4096);
  TransientHeap::Scope scope(heap);
  void* big = NewBlock(TransientHeap::kSlotBytes + 1);
  EXPECT_FALSE(TransientHeap::Owns(big));
  DeleteBlock(big);
  EXPECT_EQ(heap.overflowed(), 1u);
  // A full slot also falls through, and still serves again once its blocks are back.
  for (size_t used = 0; used + 4096 <= TransientHeap::kSlotBytes; used += 4096) {
    held.push_back(NewBlock(4096));
  }
  void* spill = NewBlock(4096);
  EXPECT_FALSE(TransientHeap::Owns(spill));
  DeleteBlock(spill);
  for (void* p : held) DeleteBlock(p);
  void* back = NewBlock(4096);
  EXPECT_TRUE(TransientHeap::Owns(back));
  DeleteBlock(back);
}

TEST(TransientHeap, ScopesNestAndRestore) {
  TransientHeap outer, inner;
  TransientHeap::Scope a(outer);
  {
    TransientHeap::Scope b(inner);
    EXPECT_EQ(TransientHeap::Current(), &inner);
  }
  EXPECT_EQ(TransientHeap::Current(), &outer);
}

TEST(TransientHeap, ASlotWithABlockStillOutIsRetiredNotRecycled) {
  void* survivor = nullptr;
  {
    TransientHeap heap;
    TransientHeap::Scope scope(heap);
    survivor = NewBlock(64);
    std::memset(survivor, 0x5a, 64);
  }
  // Slots are reused last-in first-out: a recycled slot would be this one.
  TransientHeap next;
  TransientHeap::Scope scope(next);
  void* fresh = NewBlock(64);
  EXPECT_NE(fresh, survivor);
  std::memset(fresh, 0, 64);
  EXPECT_EQ(static_cast<unsigned char*>(survivor)[63], 0x5a);
  DeleteBlock(fresh);
  DeleteBlock(survivor);
}

TEST(TransientHeap, WhenEverySlotIsClaimedTheHeapIsInert) {
  std::vector<std::unique_ptr<TransientHeap>> heaps;
  while (heaps.size() < 10000) {
    heaps.push_back(std::make_unique<TransientHeap>());
    if (!heaps.back()->active()) break;
  }
  ASSERT_FALSE(heaps.back()->active());
  TransientHeap::Scope scope(*heaps.back());
  void* p = NewBlock(16);
  EXPECT_FALSE(TransientHeap::Owns(p));
  DeleteBlock(p);
  EXPECT_EQ(heaps.back()->overflowed(), 1u);
}

}  // namespace
}  // namespace kiln::cpu

#include "server/generate/spare_memory.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <utility>

#include "base/huge_pages.h"
#include "base/memory_budget.h"

namespace kiln::server::generate {

void SpareMemory::Keep(std::vector<Tensor> tensors) {
  std::vector<Block> seen;
  for (const Tensor& t : tensors) {
    // A view into part of a buffer has no size of its own to reuse.
    if (!t.defined() || !t.owner() || t.raw() != t.owner().get()) continue;
    const bool again =
        std::any_of(seen.begin(), seen.end(), [&](const Block& b) { return b.owner == t.owner(); });
    if (!again) seen.push_back(Block{t.owner(), t.nbytes()});
  }
  tensors.clear();
  std::lock_guard<std::mutex> lk(mu_);
  // A buffer this set handed out is kept at its whole size, not the size of the tensor it
  // last held: a small step's tensor on a large buffer leaves it large for the next.
  handed_.erase(std::remove_if(handed_.begin(), handed_.end(),
                               [](const Handed& h) { return h.owner.expired(); }),
                handed_.end());
  for (Block& b : seen) {
    if (b.owner.use_count() != 1) continue;
    for (auto h = handed_.begin(); h != handed_.end(); ++h) {
      if (!h->owner.owner_before(b.owner) && !b.owner.owner_before(h->owner)) {
        b.bytes = std::max(b.bytes, h->capacity);
        handed_.erase(h);  // kept now, with its size
        break;
      }
    }
    blocks_.push_back(std::move(b));
  }
}

void SpareMemory::Trim(int64_t bytes) {
  std::vector<Block> dropped;  // freed outside the lock
  {
    std::lock_guard<std::mutex> lk(mu_);
    std::sort(blocks_.begin(), blocks_.end(),
              [](const Block& a, const Block& b) { return a.bytes > b.bytes; });
    int64_t kept = 0;
    std::vector<Block> keep;
    for (Block& b : blocks_) {
      const bool fits = kept + static_cast<int64_t>(b.bytes) <= bytes;
      if (fits) kept += static_cast<int64_t>(b.bytes);
      (fits ? keep : dropped).push_back(std::move(b));
    }
    blocks_.swap(keep);
  }
}

int64_t SpareMemory::bytes() const {
  std::lock_guard<std::mutex> lk(mu_);
  int64_t n = 0;
  for (const Block& b : blocks_) n += static_cast<int64_t>(b.bytes);
  return n;
}

namespace {

// A buffer of at least `bytes` on transparent huge pages (base/huge_pages.h), charged to the
// memory account in scope: a group's new shape faults 2 MB at a time (a 25 MB group: 13
// faults instead of ~6000). Throws as Tensor's allocation does (MemoryBudgetError,
// std::bad_alloc).
std::shared_ptr<void> HugeBlock(size_t bytes) {
  struct Held {
    MemoryReservation charge;
    HugePageBuffer buffer;
  };
  auto held = std::make_shared<Held>();
  if (const std::shared_ptr<MemoryAccount>* account = CurrentMemoryAccount()) {
    absl::StatusOr<MemoryReservation> charge =
        MemoryReservation::Make(*account, static_cast<int64_t>(HugePageRound(bytes)));
    if (!charge.ok()) throw MemoryBudgetError(charge.status());
    held->charge = std::move(*charge);
  }
  held->buffer = AllocateHugePageBacked(bytes);
  if (!held->buffer) throw std::bad_alloc();
  char* data = held->buffer.get();
  return std::shared_ptr<void>(std::move(held), data);
}

}  // namespace

Tensor SpareMemory::Zeros(DType dtype, std::vector<int64_t> shape) {
  const size_t need = static_cast<size_t>(NumElements(shape)) * DTypeSize(dtype);
  if (need == 0) return Tensor(dtype, std::move(shape));  // an empty past takes no block
  std::shared_ptr<void> owner;
  size_t capacity = 0;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto best = blocks_.end();
    for (auto it = blocks_.begin(); it != blocks_.end(); ++it) {
      // Not a buffer over twice the size (or over 2 MiB for a smaller tensor): a small step's
      // tensor would hold a large one that the next large shape then maps afresh.
      if (it->bytes >= need && it->bytes <= 2 * std::max(need, kHugePageFrom) &&
          (best == blocks_.end() || it->bytes < best->bytes)) {
        best = it;
      }
    }
    if (best != blocks_.end()) {
      owner = std::move(best->owner);
      capacity = best->bytes;
      blocks_.erase(best);
    }
  }
  const bool fresh = !owner;
  if (fresh) {
    if (need < kHugePageFrom) return Tensor(dtype, std::move(shape));
    owner = HugeBlock(need);
    capacity = HugePageRound(need);
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    handed_.push_back({owner, capacity});
  }
  // A fresh mapping is the kernel's zero pages already: written over, it would fault every
  // page now, the parts a step never writes (padding) included.
  if (!fresh) std::memset(owner.get(), 0, need);
  void* data = owner.get();
  return Tensor::View(dtype, std::move(shape), std::move(owner), data);
}

}  // namespace kiln::server::generate

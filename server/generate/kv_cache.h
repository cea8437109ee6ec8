// The key/value cache of every sequence a model is generating, held by the server in pages.
//
// One buffer, allocated when the model starts generating and charged to the process memory
// budget, is cut into pages of `page_tokens` positions. A page holds those positions for
// every cache tensor of the model (each as [outer, page_tokens, inner], the tensor's layout
// with the past axis cut to the page), so a sequence's cache is its page table: the pages in
// order, allocated as it grows and freed at once when it ends, is cancelled or is preempted.
// Nothing else is allocated per token: a full cache refuses to grow (Grow returns false) and
// the scheduler preempts a sequence; it never allocates past the budget.
//
// A step's past tensors are gathered from the pages into the class-sized inputs the engine
// takes (positions past a sequence's length stay zero: the attention mask hides them), and
// the positions a step computed are copied from its present outputs into the pages.
//
// Prefix sharing: a page whose positions a sequence has all computed is registered under a
// hash of every token up to its end (a chain over the pages; its own tokens are kept and
// compared, so a collision cannot share a wrong page). A sequence that starts with the same
// tokens takes those pages instead of computing them (SharePrefix: whole pages only, and
// never its last prompt token, whose logits it needs), each page counted once per table that
// holds it. Positions are written only past a sequence's cached length, so a shared page is
// never written. A registered page nobody holds stays cached until its page is needed: free
// pages go first, then cached ones, least recently released first.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <unordered_map>
#include <vector>

#include "base/huge_pages.h"
#include "base/memory_budget.h"
#include "base/status.h"
#include "ir/tensor.h"
#include "server/generate/decoder_contract.h"

namespace kiln::server::generate {

struct PageTable {
  std::vector<int32_t> pages;
  int64_t registered = 0;  // leading pages registered (or shared) for prefix sharing
  uint64_t chain = 0;      // the hash of the tokens those pages hold
};

class KvCache {
 public:
  // As many pages as `budget_bytes` holds (at least one sequence of `page_tokens`),
  // charged to `account`. RESOURCE_EXHAUSTED when the account refuses them.
  static absl::StatusOr<std::unique_ptr<KvCache>> Create(const DecoderContract& contract,
                                                         int64_t page_tokens, int64_t budget_bytes,
                                                         std::shared_ptr<MemoryAccount> account);
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  // Pages for `positions` positions in `table` (allocating what it lacks). False, with
  // `table` unchanged, when the free pages do not suffice.
  bool Grow(PageTable& table, int64_t positions);
  // Returns every page of `table` (now empty) to the pool; a registered page nobody else
  // holds stays cached for a later SharePrefix until its page is needed.
  void Release(PageTable& table);
  // Into the empty `table`: the registered pages holding the longest run of whole pages of
  // `tokens` that ends at or before `max_positions`. The positions they hold (a multiple of
  // page_tokens; 0 when none).
  int64_t SharePrefix(const std::vector<int64_t>& tokens, int64_t max_positions, PageTable& table);
  // Registers the pages of `table` whose positions lie wholly below `computed` (of
  // `tokens`), those not registered yet; a page whose tokens another page holds already stays
  // the table's own.
  void Register(const std::vector<int64_t>& tokens, int64_t computed, PageTable& table);
  // Pages `positions` positions need.
  int64_t PagesFor(int64_t positions) const { return (positions + page_tokens_ - 1) / page_tokens_; }

  // Writes positions [0, lengths[b]) of row b's cache tensor `j` into `past` ([rows, outer,
  // P, inner] in memory, zeroed by the caller); positions up to P only.
  void Gather(size_t j, const std::vector<const PageTable*>& rows,
              const std::vector<int64_t>& lengths, Tensor& past) const;
  // Writes positions [from, to) of `table`'s cache tensor `j` into row `row` of `dst`
  // ([rows, outer, T, inner] in memory), at the same positions; positions up to T only.
  void GatherRange(size_t j, const PageTable& table, int64_t from, int64_t to, Tensor& dst,
                   int64_t row) const;
  // Copies `count` positions of row `row` of `present` ([rows, outer, T, inner]), starting
  // at position `from`, into cache tensor `j` of `table` at positions [to, to + count).
  // Precondition: `table` has pages for to + count positions.
  void Scatter(size_t j, const Tensor& present, int64_t row, int64_t from, int64_t count,
               const PageTable& table, int64_t to);

  int64_t page_tokens() const { return page_tokens_; }
  int64_t pages_total() const { return static_cast<int64_t>(pages_total_); }
  // Pages a Grow may take: free ones and cached ones nobody holds.
  int64_t pages_free() const { return static_cast<int64_t>(free_.size() + lru_.size()); }
  int64_t pages_cached() const { return static_cast<int64_t>(lru_.size()); }
  int64_t bytes() const { return bytes_; }

 private:
  KvCache(const DecoderContract& contract, int64_t page_tokens, int64_t pages);
  // Start of cache tensor j's block in `page`.
  char* Block(int32_t page, size_t j) const {
    return base_.get() + static_cast<int64_t>(page) * page_bytes_ + tensor_offset_[j];
  }

  const int64_t page_tokens_;
  std::vector<CacheTensor> tensors_;
  std::vector<int64_t> tensor_offset_;  // bytes, within a page
  int64_t page_bytes_ = 0;
  size_t pages_total_ = 0;
  int64_t bytes_ = 0;
  HugePageBuffer base_;
  // A page for a table: a free one, else the least recently released cached one.
  int32_t TakePage();
  uint64_t PageKey(uint64_t chain, const std::vector<int64_t>& tokens, int64_t page) const;

  std::vector<int32_t> free_;  // a stack: the most recently freed page is reused first
  std::vector<int32_t> refs_;  // tables holding each page
  std::vector<uint64_t> key_;  // each page's registration (0: none)
  std::vector<int64_t> ids_;   // a registered page's tokens, page_tokens per page
  std::unordered_map<uint64_t, int32_t> index_;  // registration -> page
  std::list<int32_t> lru_;  // registered pages nobody holds, least recently released first
  std::vector<std::list<int32_t>::iterator> lru_at_;
  MemoryReservation reservation_;
};

}  // namespace kiln::server::generate

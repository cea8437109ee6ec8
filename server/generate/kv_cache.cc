#include "server/generate/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace kiln::server::generate {

KvCache::KvCache(const DecoderContract& contract, int64_t page_tokens, int64_t pages)
    : page_tokens_(page_tokens), tensors_(contract.cache) {
  for (const CacheTensor& t : tensors_) {
    tensor_offset_.push_back(page_bytes_);
    page_bytes_ += t.slot_bytes() * page_tokens_;
  }
  pages_total_ = static_cast<size_t>(pages);
  bytes_ = page_bytes_ * pages;
  free_.reserve(pages_total_);
  for (int64_t p = pages - 1; p >= 0; --p) free_.push_back(static_cast<int32_t>(p));
  refs_.assign(pages_total_, 0);
  key_.assign(pages_total_, 0);
  lru_at_.assign(pages_total_, lru_.end());
}

absl::StatusOr<std::unique_ptr<KvCache>> KvCache::Create(const DecoderContract& contract,
                                                         int64_t page_tokens,
                                                         int64_t budget_bytes,
                                                         std::shared_ptr<MemoryAccount> account) {
  if (page_tokens < 1) return absl::InvalidArgumentError("kv page_tokens must be >= 1");
  const int64_t page_bytes = contract.slot_bytes() * page_tokens;
  if (page_bytes <= 0) return absl::InvalidArgumentError("the model's cache has no bytes");
  const int64_t pages = std::min<int64_t>(budget_bytes / page_bytes, INT32_MAX);
  if (pages < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "generation.kv_cache_bytes ", budget_bytes, " holds no page (one page of ", page_tokens,
        " positions is ", page_bytes, " bytes)"));
  }
  std::unique_ptr<KvCache> c(new KvCache(contract, page_tokens, pages));
  ASSIGN_OR_RETURN(
      c->reservation_,
      MemoryReservation::Make(std::move(account),
                              static_cast<int64_t>(HugePageRound(static_cast<size_t>(c->bytes_)))));
  // Not zeroed: a position is read only after a step wrote it.
  c->base_ = AllocateHugePageBacked(static_cast<size_t>(c->bytes_));
  if (!c->base_) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate the kv cache (",
                                                     c->bytes_, " bytes)"));
  }
  return c;
}

bool KvCache::Grow(PageTable& table, int64_t positions) {
  const int64_t need = PagesFor(positions) - static_cast<int64_t>(table.pages.size());
  if (need <= 0) return true;
  if (need > pages_free()) return false;
  for (int64_t i = 0; i < need; ++i) table.pages.push_back(TakePage());
  return true;
}

int32_t KvCache::TakePage() {
  int32_t p;
  if (!free_.empty()) {
    p = free_.back();
    free_.pop_back();
  } else {  // the least recently released cached page: its registration goes
    p = lru_.front();
    lru_.pop_front();
    lru_at_[static_cast<size_t>(p)] = lru_.end();
    index_.erase(key_[static_cast<size_t>(p)]);
    key_[static_cast<size_t>(p)] = 0;
  }
  refs_[static_cast<size_t>(p)] = 1;
  return p;
}

void KvCache::Release(PageTable& table) {
  for (int32_t p : table.pages) {
    const auto i = static_cast<size_t>(p);
    if (--refs_[i] > 0) continue;
    if (key_[i] != 0) {
      lru_at_[i] = lru_.insert(lru_.end(), p);
    } else {
      free_.push_back(p);
    }
  }
  table = PageTable{};
}

uint64_t KvCache::PageKey(uint64_t chain, const std::vector<int64_t>& tokens, int64_t page) const {
  // splitmix64 over the chain and the page's tokens; never 0 (0 marks "not registered").
  uint64_t h = chain ^ 0x9e3779b97f4a7c15ull;
  for (int64_t k = page * page_tokens_; k < (page + 1) * page_tokens_; ++k) {
    h += static_cast<uint64_t>(tokens[static_cast<size_t>(k)]) + 0x9e3779b97f4a7c15ull;
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
    h ^= h >> 31;
  }
  return h | 1;
}

int64_t KvCache::SharePrefix(const std::vector<int64_t>& tokens, int64_t max_positions,
                             PageTable& table) {
  if (!table.pages.empty()) return 0;
  const int64_t whole =
      std::min<int64_t>(max_positions, static_cast<int64_t>(tokens.size())) / page_tokens_;
  for (int64_t k = 0; k < whole; ++k) {
    const uint64_t key = PageKey(table.chain, tokens, k);
    auto it = index_.find(key);
    if (it == index_.end()) break;
    const auto p = static_cast<size_t>(it->second);
    const int64_t* held = &ids_[p * static_cast<size_t>(page_tokens_)];
    if (!std::equal(held, held + page_tokens_, tokens.begin() + k * page_tokens_)) break;
    if (refs_[p]++ == 0) {
      lru_.erase(lru_at_[p]);
      lru_at_[p] = lru_.end();
    }
    table.pages.push_back(it->second);
    table.chain = key;
    table.registered = k + 1;
  }
  return table.registered * page_tokens_;
}

void KvCache::Register(const std::vector<int64_t>& tokens, int64_t computed, PageTable& table) {
  if (ids_.empty()) ids_.resize(pages_total_ * static_cast<size_t>(page_tokens_));
  const int64_t whole =
      std::min<int64_t>({computed, static_cast<int64_t>(tokens.size()),
                         static_cast<int64_t>(table.pages.size()) * page_tokens_}) /
      page_tokens_;
  for (int64_t k = table.registered; k < whole; ++k) {
    const uint64_t key = PageKey(table.chain, tokens, k);
    const auto p = static_cast<size_t>(table.pages[static_cast<size_t>(k)]);
    if (key_[p] == 0 && index_.emplace(key, table.pages[static_cast<size_t>(k)]).second) {
      key_[p] = key;
      std::copy(tokens.begin() + k * page_tokens_, tokens.begin() + (k + 1) * page_tokens_,
                ids_.begin() + static_cast<int64_t>(p) * page_tokens_);
    }
    table.chain = key;
    table.registered = k + 1;
  }
}

void KvCache::Gather(size_t j, const std::vector<const PageTable*>& rows,
                     const std::vector<int64_t>& lengths, Tensor& past) const {
  for (size_t b = 0; b < rows.size(); ++b) {
    GatherRange(j, *rows[b], 0, lengths[b], past, static_cast<int64_t>(b));
  }
}

void KvCache::GatherRange(size_t j, const PageTable& table, int64_t from, int64_t to, Tensor& dst,
                          int64_t row) const {
  const CacheTensor& t = tensors_[j];
  const int64_t elem = static_cast<int64_t>(DTypeSize(t.dtype));
  const int64_t T = dst.dim(t.axis);
  const int64_t run = t.inner * elem;  // one position of one outer index
  to = std::min(to, T);
  char* base = static_cast<char*>(dst.raw_mutable());
  for (int64_t o = 0; o < t.outer; ++o) {
    char* row_dst = base + ((row * t.outer + o) * T) * run;
    // Page by page: a page holds page_tokens_ consecutive positions of each outer index.
    for (int64_t pos = from; pos < to;) {
      const int64_t in_page = pos % page_tokens_;
      const int64_t n = std::min(page_tokens_ - in_page, to - pos);
      const char* src =
          Block(table.pages[pos / page_tokens_], j) + (o * page_tokens_ + in_page) * run;
      std::memcpy(row_dst + pos * run, src, static_cast<size_t>(n * run));
      pos += n;
    }
  }
}

void KvCache::Scatter(size_t j, const Tensor& present, int64_t row, int64_t from, int64_t count,
                      const PageTable& table, int64_t to) {
  const CacheTensor& t = tensors_[j];
  const int64_t elem = static_cast<int64_t>(DTypeSize(t.dtype));
  const int64_t T = present.dim(t.axis);
  const int64_t run = t.inner * elem;
  const char* src = static_cast<const char*>(present.raw());
  for (int64_t o = 0; o < t.outer; ++o) {
    const char* row_src = src + ((row * t.outer + o) * T + from) * run;
    for (int64_t k = 0; k < count; ++k) {
      const int64_t pos = to + k;
      char* dst = Block(table.pages[pos / page_tokens_], j) +
                  (o * page_tokens_ + pos % page_tokens_) * run;
      std::memcpy(dst, row_src + k * run, static_cast<size_t>(run));
    }
  }
}

}  // namespace kiln::server::generate

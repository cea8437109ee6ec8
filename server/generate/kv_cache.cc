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
  ASSIGN_OR_RETURN(c->reservation_, MemoryReservation::Make(std::move(account), c->bytes_));
  // Not zeroed: a position is read only after a step wrote it.
  c->base_.reset(new (std::nothrow) char[static_cast<size_t>(c->bytes_)]);
  if (!c->base_) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate the kv cache (",
                                                     c->bytes_, " bytes)"));
  }
  return c;
}

bool KvCache::Grow(PageTable& table, int64_t positions) {
  const int64_t need = PagesFor(positions) - static_cast<int64_t>(table.pages.size());
  if (need <= 0) return true;
  if (need > static_cast<int64_t>(free_.size())) return false;
  for (int64_t i = 0; i < need; ++i) {
    table.pages.push_back(free_.back());
    free_.pop_back();
  }
  return true;
}

void KvCache::Release(PageTable& table) {
  for (int32_t p : table.pages) free_.push_back(p);
  table.pages.clear();
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

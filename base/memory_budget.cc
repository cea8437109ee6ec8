#include "base/memory_budget.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <limits>

namespace kiln {
namespace {

thread_local const MemoryScope* g_top_scope = nullptr;
thread_local const std::shared_ptr<MemoryAccount>* g_top_account = nullptr;

std::string MiB(int64_t bytes) {
  return absl::StrCat(bytes / (1 << 20), " MiB");
}

// A cgroup's memory limit (v2, then v1); 0 when none is set or none can be read.
int64_t CgroupLimit() {
  for (const char* path : {"/sys/fs/cgroup/memory.max",
                           "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream in(path);
    std::string text;
    if (!(in >> text) || text == "max") continue;
    try {
      const long long v = std::stoll(text);
      // v1 reports "no limit" as a huge page-rounded number.
      if (v > 0 && v < (int64_t{1} << 60)) return v;
    } catch (...) {
    }
  }
  return 0;
}

}  // namespace

MemoryAccount::MemoryAccount(std::string what, int64_t cap, std::shared_ptr<MemoryAccount> parent,
                             std::string config_key)
    : what_(std::move(what)),
      config_key_(std::move(config_key)),
      parent_(std::move(parent)),
      cap_(cap) {}

absl::Status MemoryAccount::ChargeHere(int64_t bytes, const MemoryAccount& asked) {
  const int64_t cap = cap_.load(std::memory_order_relaxed);
  int64_t now = used_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  if (cap > 0 && now > cap) {
    used_.fetch_sub(bytes, std::memory_order_relaxed);
    return absl::ResourceExhaustedError(absl::StrCat(
        "memory budget exceeded: ", asked.what_, " asks for ", MiB(bytes), " more, past ",
        this == &asked ? std::string("its") : what_ + "'s", " cap of ", MiB(cap),
        config_key_.empty() ? "" : absl::StrCat(" (", config_key_, ")"), ", which has ",
        MiB(std::max<int64_t>(0, cap - (now - bytes))), " left"));
  }
  int64_t peak = peak_.load(std::memory_order_relaxed);
  while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
  return absl::OkStatus();
}

absl::Status MemoryAccount::Charge(int64_t bytes) {
  if (bytes <= 0) return absl::OkStatus();
  for (MemoryAccount* a = this; a != nullptr; a = a->parent_.get()) {
    absl::Status s = a->ChargeHere(bytes, *this);
    if (!s.ok()) {
      for (MemoryAccount* b = this; b != a; b = b->parent_.get()) {
        b->used_.fetch_sub(bytes, std::memory_order_relaxed);
      }
      return s;
    }
  }
  return absl::OkStatus();
}

void MemoryAccount::Release(int64_t bytes) {
  if (bytes <= 0) return;
  for (MemoryAccount* a = this; a != nullptr; a = a->parent_.get()) {
    a->used_.fetch_sub(bytes, std::memory_order_relaxed);
  }
}

const std::shared_ptr<MemoryAccount>& ProcessMemory() {
  static const auto* root =
      new std::shared_ptr<MemoryAccount>(std::make_shared<MemoryAccount>(
          "the server", 0, nullptr, "server.memory_budget_bytes"));
  return *root;
}

int64_t DefaultMemoryBudget() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  int64_t total = pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : int64_t{8} << 30;
  if (const int64_t cg = CgroupLimit(); cg > 0) total = std::min(total, cg);
  return total / 5 * 4;
}

absl::StatusOr<MemoryReservation> MemoryReservation::Make(std::shared_ptr<MemoryAccount> account,
                                                          int64_t bytes) {
  MemoryReservation r;
  if (!account || bytes <= 0) return r;
  RETURN_IF_ERROR(account->Charge(bytes));
  r.account_ = std::move(account);
  r.bytes_ = bytes;
  return r;
}

MemoryReservation& MemoryReservation::operator=(MemoryReservation&& o) noexcept {
  if (this != &o) {
    Reset();
    account_ = std::move(o.account_);
    bytes_ = o.bytes_;
    o.bytes_ = 0;
  }
  return *this;
}

void MemoryReservation::Reset() {
  if (account_) account_->Release(bytes_);
  account_.reset();
  bytes_ = 0;
}

MemoryScope::MemoryScope(std::shared_ptr<MemoryAccount> account)
    : account_(std::move(account)), outer_(g_top_scope) {
  g_top_scope = this;
  g_top_account = account_ ? &account_ : nullptr;
}

MemoryScope::~MemoryScope() {
  g_top_scope = outer_;
  g_top_account = outer_ && outer_->account_ ? &outer_->account_ : nullptr;
}

const std::shared_ptr<MemoryAccount>* CurrentMemoryAccount() { return g_top_account; }

}  // namespace kiln

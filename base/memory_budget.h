// The process's memory budget, and the accounts that charge against it.
//
// A server must not let one request, one upload or one model build take the whole machine:
// a 186-byte model can ask for a 3.6 GB constant, a 54 KB BatchPredict for a 2 GB answer.
// So the memory that inputs, outputs, batches, constant folds and reference runs allocate is
// charged to an account before it is allocated, and a charge that would pass the account's
// cap, or any cap above it, fails with RESOURCE_EXHAUSTED naming the budget.
//
// Accounts form a tree: the process account at the root (its cap is the server's
// memory_budget_bytes), below it one account per model build, request or batch (with a cap
// of its own where the config sets one). A charge is made on every account up to the root,
// and undone on all of them if any refuses.
//
// Tensor buffers are charged without their allocating code knowing it: a MemoryScope names
// the account that buffers allocated on this thread are charged to (the innermost scope
// wins); the buffer's deleter gives the bytes back to that account, on whatever thread and
// however long after the scope it is freed. A refused charge inside a scope throws
// MemoryBudgetError (a std::bad_alloc) from the allocation; the boundaries that open scopes
// (a model build, the reference interpreter's node runs, a request handler, a batch run)
// catch it and return its status. Outside every scope nothing is charged.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <utility>

#include "base/status.h"

namespace kiln {

class MemoryAccount {
 public:
  // `cap` <= 0: no cap of its own (only the parent's). `what` names the account in errors
  // ("model build 'resnet' version 1", "request"); `config_key` names the setting that
  // sets the cap ("server.memory_budget_bytes"), for the error to say what to change.
  MemoryAccount(std::string what, int64_t cap, std::shared_ptr<MemoryAccount> parent,
                std::string config_key = "");
  MemoryAccount(const MemoryAccount&) = delete;
  MemoryAccount& operator=(const MemoryAccount&) = delete;

  // Charges `bytes` to this account and every one above it; RESOURCE_EXHAUSTED, and nothing
  // charged anywhere, when that would pass a cap.
  absl::Status Charge(int64_t bytes);
  void Release(int64_t bytes);

  int64_t used() const { return used_.load(std::memory_order_relaxed); }
  int64_t peak() const { return peak_.load(std::memory_order_relaxed); }
  int64_t cap() const { return cap_.load(std::memory_order_relaxed); }
  void set_cap(int64_t cap) { cap_.store(cap, std::memory_order_relaxed); }
  const std::string& what() const { return what_; }

 private:
  absl::Status ChargeHere(int64_t bytes, const MemoryAccount& asked);

  const std::string what_;
  const std::string config_key_;
  const std::shared_ptr<MemoryAccount> parent_;
  std::atomic<int64_t> cap_;
  std::atomic<int64_t> used_{0};
  std::atomic<int64_t> peak_{0};
};

// The root account. No cap until a server sets one (tools and tests run unlimited).
const std::shared_ptr<MemoryAccount>& ProcessMemory();

// The default for a server's budget: 80 % of what the machine gives this process (the
// smaller of physical memory and a cgroup memory limit).
int64_t DefaultMemoryBudget();

// Bytes held for as long as the object lives (an output about to be encoded, a batch
// being assembled): memory the code allocates outside Tensor buffers, or before it knows
// which buffers.
class MemoryReservation {
 public:
  MemoryReservation() = default;
  static absl::StatusOr<MemoryReservation> Make(std::shared_ptr<MemoryAccount> account,
                                                int64_t bytes);
  MemoryReservation(MemoryReservation&& o) noexcept { *this = std::move(o); }
  MemoryReservation& operator=(MemoryReservation&& o) noexcept;
  ~MemoryReservation() { Reset(); }
  void Reset();

 private:
  std::shared_ptr<MemoryAccount> account_;
  int64_t bytes_ = 0;
};

// What a refused charge inside a MemoryScope throws from the allocation.
class MemoryBudgetError : public std::bad_alloc {
 public:
  explicit MemoryBudgetError(absl::Status status) : status_(std::move(status)) {}
  const char* what() const noexcept override { return "memory budget exceeded"; }
  const absl::Status& status() const { return status_; }

 private:
  absl::Status status_;
};

// Tensor buffers allocated on this thread while the scope lives are charged to `account`.
class MemoryScope {
 public:
  explicit MemoryScope(std::shared_ptr<MemoryAccount> account);
  ~MemoryScope();
  MemoryScope(const MemoryScope&) = delete;
  MemoryScope& operator=(const MemoryScope&) = delete;

 private:
  std::shared_ptr<MemoryAccount> account_;
  const MemoryScope* outer_;
};

// The innermost scope's account on this thread, or null.
const std::shared_ptr<MemoryAccount>* CurrentMemoryAccount();

// Runs `fn` (returning absl::Status or absl::StatusOr<T>) and turns an allocation that the
// budget refused (MemoryBudgetError), or that the system refused (std::bad_alloc), into
// RESOURCE_EXHAUSTED.
template <class Fn>
auto CatchOutOfMemory(Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const MemoryBudgetError& e) {
    return e.status();
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("out of memory: an allocation failed");
  }
}

// Runs `fn` with Tensor buffers charged to `account` (a MemoryScope), and a refused
// allocation turned into RESOURCE_EXHAUSTED (CatchOutOfMemory): what every boundary that
// opens an account does.
template <class Fn>
auto WithinBudget(std::shared_ptr<MemoryAccount> account, Fn&& fn) -> decltype(fn()) {
  const MemoryScope scope(std::move(account));
  return CatchOutOfMemory(std::forward<Fn>(fn));
}

}  // namespace kiln

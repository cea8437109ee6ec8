// One mutex per key, made on first use and freed when nobody holds or waits for it: the
// registry serializes everything that writes one model name (choosing a version, building,
// committing files, unloading) without serializing different names, and without a map that
// grows with every name a client ever tried.
#pragma once

#include <map>
#include <mutex>
#include <string>

namespace kiln::server {

class KeyedMutex {
 public:
  // Holds the key's mutex until destroyed. Move-only.
  class Lock {
   public:
    Lock(Lock&& other) noexcept : owner_(other.owner_), key_(std::move(other.key_)) {
      other.owner_ = nullptr;
    }
    Lock& operator=(Lock&&) = delete;
    ~Lock() {
      if (owner_) owner_->Release(key_);
    }

   private:
    friend class KeyedMutex;
    Lock(KeyedMutex* owner, std::string key) : owner_(owner), key_(std::move(key)) {}
    KeyedMutex* owner_;
    std::string key_;
  };

  Lock Acquire(const std::string& key) {
    Entry* e;
    {
      std::lock_guard<std::mutex> lk(mu_);
      e = &entries_[key];  // std::map nodes stay put while other keys come and go
      ++e->users;
    }
    e->mu.lock();
    return Lock(this, key);
  }

  // How many keys have holders or waiters (tests: the map does not grow).
  size_t size() const {
    std::lock_guard<std::mutex> lk(mu_);
    return entries_.size();
  }

 private:
  struct Entry {
    std::mutex mu;
    int users = 0;  // holders and waiters; guarded by KeyedMutex::mu_
  };

  void Release(const std::string& key) {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = entries_.find(key);
    it->second.mu.unlock();
    if (--it->second.users == 0) entries_.erase(it);
  }

  mutable std::mutex mu_;
  std::map<std::string, Entry> entries_;  // guarded by mu_
};

}  // namespace kiln::server

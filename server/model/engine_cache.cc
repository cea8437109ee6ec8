#include "server/model/engine_cache.h"

#include <spdlog/spdlog.h>

#include <filesystem>

#include "base/file.h"
#include "base/stop.h"
#include "server/common/files.h"

namespace kiln::server {
namespace {

namespace fs = std::filesystem;

}  // namespace

EngineCache::EngineCache(std::string dir, size_t memory_budget_bytes)
    : dir_(std::move(dir)), budget_(memory_budget_bytes) {
  if (!dir_.empty()) {
    std::error_code ec;
    fs::create_directories(dir_, ec);
    if (ec) spdlog::warn("engine cache: cannot create {}: {}", dir_, ec.message());
    // A crash between writing an entry's temporary and renaming it leaves the temporary;
    // nothing reads it, so it would only take space.
    for (const auto& e : fs::directory_iterator(dir_, ec)) {
      const std::string name = e.path().filename().string();
      // IsTempName: WriteFileAtomically's temporaries; the others: those of older versions.
      if (!IsTempName(name) && name.find(".kec.tmp.") == std::string::npos &&
          name.find(".keb.tmp.") == std::string::npos) {
        continue;
      }
      spdlog::warn("engine cache: removed the temporary file {}", e.path().string());
      fs::remove(e.path(), ec);
    }
  }
}

std::string EngineCache::PathOf(const EngineCacheKey& key) const {
  if (dir_.empty()) return "";
  return (fs::path(dir_) / (ContentHash(key.ToString()) + ".kec")).string();
}

std::string EngineCache::BlobPath(const std::string& id) const {
  if (dir_.empty()) return "";
  return (fs::path(dir_) / (id + ".keb")).string();
}

absl::StatusOr<Tensor> EngineCache::LoadBlob(const std::string& id, size_t bytes) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = live_blobs_.find(id);
    if (it != live_blobs_.end()) {
      if (std::shared_ptr<const Tensor> live = it->second.lock(); live && live->nbytes() == bytes) {
        ++stats_.blobs_shared;
        return BytesView(std::move(live));
      }
    }
  }
  const std::string path = BlobPath(id);
  if (path.empty()) return absl::NotFoundError("no cache directory");
  absl::StatusOr<Tensor> mapped = MapBlob(path, id, bytes);
  if (!mapped.ok()) {
    std::error_code ec;
    if (absl::IsDataLoss(mapped.status())) fs::remove(path, ec);  // rewritten by the rebuild
    return mapped.status();
  }
  // Views handed out keep `shared` alive, and with it this map's weak reference.
  auto shared = std::make_shared<const Tensor>(*std::move(mapped));
  std::lock_guard<std::mutex> lk(mu_);
  ++stats_.blobs_mapped;
  for (auto it = live_blobs_.begin(); it != live_blobs_.end();) {
    it = it->second.expired() ? live_blobs_.erase(it) : std::next(it);
  }
  live_blobs_[id] = shared;
  return BytesView(std::move(shared));
}

absl::Status EngineCache::WriteBlob(const std::string& id, const Tensor& bytes) {
  const std::string path = BlobPath(id);
  std::error_code ec;
  // Another bucket (or model) stored it already. Same size but other bytes is caught by the
  // next lookup's hash, which removes the file for its rebuild to write again.
  if (fs::file_size(path, ec) == kBlobHeaderBytes + bytes.nbytes() && !ec) return absl::OkStatus();
  const std::string header = BlobHeader(bytes.nbytes());
  RETURN_IF_ERROR(WriteFileAtomically(
      path, {header, std::string_view(static_cast<const char*>(bytes.raw()), bytes.nbytes())}));
  std::lock_guard<std::mutex> lk(mu_);
  ++stats_.blobs_written;
  return absl::OkStatus();
}

EngineCache::Stats EngineCache::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

void EngineCache::RememberLocked(const std::string& id, std::shared_ptr<const EngineCacheEntry> e) {
  auto old = memory_.find(id);
  if (old != memory_.end()) {
    memory_bytes_ -= old->second->ApproxBytes();
    memory_.erase(old);
    order_.remove(id);
  }
  // An entry above the whole budget (a large model's graph) would only double that model's
  // resident memory; it is served from disk instead.
  if (e->ApproxBytes() > budget_) return;
  memory_bytes_ += e->ApproxBytes();
  memory_[id] = std::move(e);
  order_.push_back(id);
  while (memory_bytes_ > budget_) {
    auto victim = memory_.find(order_.front());
    memory_bytes_ -= victim->second->ApproxBytes();
    memory_.erase(victim);
    order_.pop_front();
  }
}

std::shared_ptr<const EngineCacheEntry> EngineCache::Lookup(const EngineCacheKey& key) {
  const std::string id = key.ToString();
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = memory_.find(id);
    if (it != memory_.end()) {
      ++stats_.memory_hits;
      return it->second;
    }
  }
  const std::string path = PathOf(key);
  std::error_code ec;
  if (path.empty() || !fs::exists(path, ec)) {
    std::lock_guard<std::mutex> lk(mu_);
    ++stats_.misses;
    return nullptr;
  }
  // An unreadable file decodes as empty: rejected and removed like any corrupt one, and so
  // is an entry whose blobs are missing or corrupt.
  auto entry =
      DecodeEntry(ReadWholeFile(path).value_or(""), key,
                  [this](const std::string& id, size_t bytes) { return LoadBlob(id, bytes); });
  std::lock_guard<std::mutex> lk(mu_);
  if (!entry.ok()) {
    spdlog::warn("engine cache: rejected {}: {}", path, std::string(entry.status().message()));
    fs::remove(path, ec);
    ++stats_.rejected_files;
    ++stats_.misses;
    return nullptr;
  }
  ++stats_.disk_hits;
  auto shared = std::make_shared<const EngineCacheEntry>(std::move(*entry));
  RememberLocked(id, shared);
  return shared;
}

absl::Status EngineCache::Store(const EngineCacheKey& key, EngineCacheEntry entry) {
  auto shared = std::make_shared<const EngineCacheEntry>(std::move(entry));
  {
    std::lock_guard<std::mutex> lk(mu_);
    RememberLocked(key.ToString(), shared);
  }
  const std::string path = PathOf(key);
  if (path.empty()) return absl::OkStatus();
  // The blobs first: an entry is never on disk before the blobs it names.
  for (const auto& [id, bytes] : shared->blobs) RETURN_IF_ERROR(WriteBlob(id, bytes));
  return WriteFileAtomically(path, {EncodeEntry(key, *shared)}, "cache-written");
}

void EngineCache::Invalidate(const EngineCacheKey& key) {
  // A build being stopped (shutdown) fails its re-verification because of the stop, not
  // because of the entry: keep the entry for the next start.
  if (!CheckStop().ok()) return;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = memory_.find(key.ToString());
    if (it != memory_.end()) {
      memory_bytes_ -= it->second->ApproxBytes();
      order_.remove(it->first);
      memory_.erase(it);
    }
  }
  const std::string path = PathOf(key);
  std::error_code ec;
  if (!path.empty()) fs::remove(path, ec);
}

}  // namespace kiln::server

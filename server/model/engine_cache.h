// The engine cache: what compiling a model bucket produced, kept in memory and (with
// `engine_cache_dir`) on disk, so a reload or a warm restart skips the pass pipeline and the
// reference run of the warm-up check.
//
// Key: the model file's content hash, kCompilerVersion, the compile options (opt level, the
// level's pass list, disabled passes), the device with a fingerprint of the CPU's ISA, and the
// batch size. An entry holds the optimized graph (an ONNX ModelProto written by the exporter,
// ai.kiln ops included), the compile report, the warm-up outcome (passes the bisection
// disabled, errors), the reference interpreter's outputs on the seeded warm-up inputs and the
// engine's tuned layout.
// The caller re-verifies a hit by running the rebuilt engine once on those inputs against the
// stored outputs, so a hit is never trusted blindly.
//
// Weights are stored once, not once per bucket: an entry's graph names each constant of
// kBlobMinBytes or more by the content hash of its bytes ("blob:<hash>", written as ONNX
// external data), and the bytes live in a blob file `<hash>.keb` beside the entries, shared
// by every bucket (and every model) with the same constant. A warm load maps each blob once
// (MappedFile) and the buckets' graphs all view the same pages: ResNet-50's four buckets read
// ~100 MB instead of ~400 MB and copy none of it.
//
// An entry file is trusted only when its magic, format version, trailing checksum and the
// full key written inside it all match, and every blob it names exists with the size it
// recorded and bytes that hash to its name; anything else is a miss, the entry file (and a
// corrupt blob) is removed, and the rebuilt bucket writes them again. Files are written to a
// temporary name and renamed into place, blobs before the entry that names them, so a crash
// never leaves a half-written file under a real name nor an entry without its blobs.
// Blobs are never deleted otherwise (an invalidated entry's blobs may serve other entries).
//
// Thread-safe: one mutex guards the memory map, the blob map and the counters; disk reads
// and writes happen outside it (entries and blobs are immutable once stored).
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "base/status.h"
#include "server/model/engine_cache_format.h"

namespace kiln::server {

class EngineCache {
 public:
  struct Stats {
    int64_t memory_hits = 0, disk_hits = 0, misses = 0, rejected_files = 0;
    // Blob files mapped and verified, blobs found already mapped by an earlier lookup (a
    // bucket of the same load), and blob files written.
    int64_t blobs_mapped = 0, blobs_shared = 0, blobs_written = 0;
  };

  // `dir` empty: memory only. The memory map evicts least recently stored entries beyond
  // `memory_budget_bytes` and never holds an entry larger than the budget: it saves reloads of
  // small models, while a large model's graph would double its resident memory.
  explicit EngineCache(std::string dir, size_t memory_budget_bytes = size_t{64} << 20);

  // nullptr on a miss. A corrupt or stale file counts as rejected and is deleted.
  std::shared_ptr<const EngineCacheEntry> Lookup(const EngineCacheKey& key);
  // Memory always; disk when a directory is set (an I/O failure is returned, the memory
  // entry stays).
  absl::Status Store(const EngineCacheKey& key, EngineCacheEntry entry);
  // Forgets the entry everywhere (it failed re-verification).
  void Invalidate(const EngineCacheKey& key);

  std::string PathOf(const EngineCacheKey& key) const;  // empty without a directory
  std::string BlobPath(const std::string& id) const;    // empty without a directory
  Stats stats() const;

 private:
  void RememberLocked(const std::string& id, std::shared_ptr<const EngineCacheEntry> e);
  // The blob, from a live view of it when one exists, else mapped and verified; a corrupt
  // file is removed.
  absl::StatusOr<Tensor> LoadBlob(const std::string& id, size_t bytes);
  // Writes the blob unless a file of the right size is there already.
  absl::Status WriteBlob(const std::string& id, const Tensor& bytes);

  const std::string dir_;
  const size_t budget_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<const EngineCacheEntry>> memory_;  // guarded by mu_
  std::list<std::string> order_;  // oldest first; guarded by mu_
  size_t memory_bytes_ = 0;       // guarded by mu_
  // Blobs some graph still views, so the buckets of one load share one mapping and verify
  // each blob once.
  std::map<std::string, std::weak_ptr<const Tensor>> live_blobs_;  // guarded by mu_
  Stats stats_;                                                    // guarded by mu_
};

}  // namespace kiln::server

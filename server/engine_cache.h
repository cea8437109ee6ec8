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
// A file is trusted only when its magic, format version, trailing checksum and the full key
// written inside it all match; anything else is a miss, and the file is removed so the
// rebuilt entry replaces it. Files are written to a temporary name and renamed into place,
// so a crash never leaves a half-written entry under a real name.
//
// Thread-safe: one mutex guards the memory map and the counters; disk reads and writes happen
// outside it (entries are immutable once stored).
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "compiler/ir/tensor.h"

namespace kiln::server {

// A 128-bit content hash as 32 hex digits. Not cryptographic: it tells model files apart
// and detects corrupt cache files; a local cache directory is not an attack surface.
std::string ContentHash(std::string_view bytes);

// "cpu:" plus a hash of the CPU's ISA flags (/proc/cpuinfo), so an engine built for AVX-512
// never loads on a machine without it; "cuda:N:" plus the GPU's name, compute capability and
// the driver, CUDA, cuDNN, cuBLAS and NVRTC versions. Other devices: their name.
std::string DeviceFingerprint(const std::string& device);

struct EngineCacheKey {
  std::string model_hash;
  int compiler_version = 0;
  std::string options;  // opt level, pass list, disabled passes
  std::string device;   // DeviceFingerprint
  int64_t batch = 1;

  std::string ToString() const;  // canonical; also stored inside the file
};

struct EngineCacheEntry {
  std::string graph_onnx;  // serialized onnx::ModelProto of the optimized graph
  std::string report_json;
  std::set<std::string> disabled_passes;  // by the warm-up bisection, so far for this model
  std::string check_message;
  double max_abs_err = 0.0, max_rel_err = 0.0;
  bool checked = false;  // the warm-up check ran; `outputs` hold the reference's answers
  std::vector<std::pair<std::string, Tensor>> outputs;
  // The engine's layout choice ("blocked", "primitive"; empty: none), so a warm start builds
  // the tuned engine directly instead of tuning again.
  std::string engine_layout;

  size_t ApproxBytes() const;
};

// The file format (exposed for tests). Decode fails on any mismatch with `expected`.
std::string EncodeEntry(const EngineCacheKey& key, const EngineCacheEntry& entry);
absl::StatusOr<EngineCacheEntry> DecodeEntry(std::string_view bytes,
                                             const EngineCacheKey& expected);

class EngineCache {
 public:
  struct Stats {
    int64_t memory_hits = 0, disk_hits = 0, misses = 0, rejected_files = 0;
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
  Stats stats() const;

 private:
  void RememberLocked(const std::string& id, std::shared_ptr<const EngineCacheEntry> e);

  const std::string dir_;
  const size_t budget_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<const EngineCacheEntry>> memory_;  // guarded by mu_
  std::list<std::string> order_;  // oldest first; guarded by mu_
  size_t memory_bytes_ = 0;       // guarded by mu_
  Stats stats_;                   // guarded by mu_
};

}  // namespace kiln::server

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
#include <functional>
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
#include "compiler/onnx/exporter.h"
#include "compiler/onnx/tensor_proto.h"

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

// Constants smaller than this stay inside the entry's graph: a blob file per bias vector
// would cost more to open than to store twice.
constexpr size_t kBlobMinBytes = size_t{16} << 10;

struct EngineCacheEntry {
  // Serialized onnx::ModelProto of the optimized graph; its large constants are external
  // data at "blob:<id>" (BlobWriter), their bytes in `blobs`.
  std::string graph_onnx;
  // Blob id (ContentHash of the bytes) -> the bytes as a uint8 tensor: a freshly built
  // entry's share the graph's constants; a stored one's view the mapped blob file.
  std::map<std::string, Tensor> blobs;
  std::string report_json;
  std::set<std::string> disabled_passes;  // by the warm-up bisection, so far for this model
  std::string check_message;
  double max_abs_err = 0.0, max_rel_err = 0.0;
  double norm_rel_err = 0.0;  // the check's relative error (CheckSummary::norm_rel_err)
  bool checked = false;  // the warm-up check ran; `outputs` hold the reference's answers
  std::vector<std::pair<std::string, Tensor>> outputs;
  // The engine's layout choice ("blocked", "primitive"; empty: none), so a warm start builds
  // the tuned engine directly instead of tuning again.
  std::string engine_layout;
  // Likewise the thread tuning's outcome (made when cpu_threads is 0).
  enum class Threads : uint32_t { kNotTuned = 0, kOne = 1, kTeam = 2 };
  Threads engine_threads = Threads::kNotTuned;

  size_t ApproxBytes() const;
};

// Where BlobWriter's locations start ("blob:<id>"): ImportOptions::external_scheme.
inline constexpr char kBlobScheme[] = "blob:";

// Export hook: moves each constant of kBlobMinBytes or more (of a type stored byte for byte)
// into `entry.blobs` and names it there.
onnx_io::ExternalWriter BlobWriter(EngineCacheEntry& entry);
// Import hook: resolves those names from `entry.blobs` as views (no copy); the entry's blobs
// stay alive as long as a tensor viewing them does.
onnx_io::ExternalResolver BlobResolver(const EngineCacheEntry& entry);

// The entry file format (exposed for tests): everything but the blobs' bytes, which
// DecodeEntry asks `load_blob` for (id, byte count). Decode fails on any mismatch with
// `expected`, and on any blob `load_blob` cannot give.
using BlobLoader = std::function<absl::StatusOr<Tensor>(const std::string& id, size_t bytes)>;
std::string EncodeEntry(const EngineCacheKey& key, const EngineCacheEntry& entry);
absl::StatusOr<EngineCacheEntry> DecodeEntry(std::string_view bytes,
                                             const EngineCacheKey& expected,
                                             const BlobLoader& load_blob);

// The blob file format (exposed for tests): a 64-byte header (magic, version, byte count),
// then the bytes, 64-byte aligned for a tensor view of the mapping.
std::string EncodeBlob(const Tensor& bytes);
// NOT_FOUND without the file; DATA_LOSS when it is not the blob `id` of `bytes` bytes.
absl::StatusOr<Tensor> MapBlob(const std::string& path, const std::string& id, size_t bytes);

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
  Stats stats_;                   // guarded by mu_
};

}  // namespace kiln::server

// The engine cache's file formats (server/model/engine_cache.h keeps them on disk): the key, the
// entry (a kiln.cache.Entry protobuf message between a magic, a format version and a
// checksum: proto/kiln/cache/engine_cache.proto), the shared blob files and the content hash
// that names models, entries and blobs. Exposed for tests.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/content_hash.h"
#include "base/status.h"
#include "compiler/onnx/exporter.h"
#include "compiler/onnx/tensor_proto.h"
#include "ir/tensor.h"

namespace kiln::server {

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
  bool checked = false;       // the warm-up check ran; `outputs` hold the reference's answers
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
absl::StatusOr<EngineCacheEntry> DecodeEntry(std::string_view bytes, const EngineCacheKey& expected,
                                             const BlobLoader& load_blob);

// The blob file format: a kBlobHeaderBytes header (magic, version, byte count), then the
// bytes, 64-byte aligned for a tensor view of the mapping.
inline constexpr size_t kBlobHeaderBytes = 64;
std::string BlobHeader(size_t bytes);
// NOT_FOUND without the file; DATA_LOSS when it is not the blob `id` of `bytes` bytes.
absl::StatusOr<Tensor> MapBlob(const std::string& path, const std::string& id, size_t bytes);

// A uint8 view of `*t`'s bytes whose owner is `t` itself (so a weak_ptr to `t` lives as
// long as the view and any tensor made from it).
Tensor BytesView(std::shared_ptr<const Tensor> t);

}  // namespace kiln::server

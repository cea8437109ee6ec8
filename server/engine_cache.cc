#include "server/engine_cache.h"

#ifdef KILN_HAVE_CPU_ENGINE
#include "runtime/cpu/isa.h"
#endif

#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <spdlog/spdlog.h>

#include "base/file.h"
#include "base/stop.h"
#include "runtime/cuda/cuda_engine.h"
#include "runtime/cuda/devices.h"
#include "server/crash_point.h"
#include "server/mapped_file.h"

namespace kiln::server {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'E', 'C', '\0', '\1'};
// 2: the engine's layout. 3: constants of kBlobMinBytes or more in shared blob files.
constexpr uint32_t kFormatVersion = 4;  // 4: norm_rel_err
constexpr size_t kChecksumBytes = 32;  // the hex ContentHash of everything before it
constexpr char kBlobMagic[8] = {'K', 'I', 'L', 'N', 'B', 'L', 'B', '\1'};
constexpr uint32_t kBlobVersion = 1;
constexpr size_t kBlobHeaderBytes = 64;  // keeps the bytes 64-byte aligned in a mapping

// The splitmix64 finalizer: every input bit affects every output bit.
uint64_t Mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t Rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

// Appends little-endian scalars and length-prefixed strings.
class Writer {
 public:
  void U32(uint32_t v) { Raw(&v, sizeof v); }
  void I64(int64_t v) { Raw(&v, sizeof v); }
  void F64(double v) { Raw(&v, sizeof v); }
  void Str(std::string_view s) {
    I64(static_cast<int64_t>(s.size()));
    out.append(s.data(), s.size());
  }
  void Raw(const void* p, size_t n) { out.append(static_cast<const char*>(p), n); }
  std::string out;
};

// Reads what Writer wrote; every read is bounds-checked so a truncated file fails cleanly.
class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  bool U32(uint32_t& v) { return Raw(&v, sizeof v); }
  bool I64(int64_t& v) { return Raw(&v, sizeof v); }
  bool F64(double& v) { return Raw(&v, sizeof v); }
  bool Str(std::string& s) {
    int64_t n = 0;
    if (!I64(n) || n < 0 || static_cast<uint64_t>(n) > in_.size() - pos_) return false;
    s.assign(in_.substr(pos_, n));
    pos_ += n;
    return true;
  }
  bool Raw(void* p, size_t n) {
    if (n > in_.size() - pos_) return false;
    std::memcpy(p, in_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  bool done() const { return pos_ == in_.size(); }

 private:
  std::string_view in_;
  size_t pos_ = 0;
};

void WriteTensor(Writer& w, const std::string& name, const Tensor& t) {
  w.Str(name);
  w.U32(static_cast<uint32_t>(t.dtype()));
  w.U32(static_cast<uint32_t>(t.rank()));
  for (int64_t d : t.shape()) w.I64(d);
  w.Str(std::string_view(static_cast<const char*>(t.raw()), t.nbytes()));
}

bool ReadTensor(Reader& r, std::string& name, Tensor& t) {
  uint32_t dtype = 0, rank = 0;
  if (!r.Str(name) || !r.U32(dtype) || !r.U32(rank) || rank > 16) return false;
  std::vector<int64_t> shape(rank);
  for (int64_t& d : shape) {
    if (!r.I64(d) || d < 0) return false;
  }
  std::string bytes;
  if (!r.Str(bytes)) return false;
  t = Tensor(static_cast<DType>(dtype), shape);
  if (t.nbytes() != bytes.size()) return false;
  std::memcpy(t.raw_mutable(), bytes.data(), bytes.size());
  return true;
}

absl::Status Corrupt(const std::string& why) {
  return absl::DataLossError("engine cache entry: " + why);
}

// A uint8 view of `*t`'s bytes whose owner is `t` itself (so a weak_ptr to `t` lives as
// long as the view and any tensor made from it).
Tensor BytesView(std::shared_ptr<const Tensor> t) {
  void* data = const_cast<void*>(t->raw());
  const auto n = static_cast<int64_t>(t->nbytes());
  return Tensor::View(DType::kUInt8, {n}, std::shared_ptr<void>(std::move(t), data), data);
}

Tensor BytesOf(const Tensor& t) { return BytesView(std::make_shared<const Tensor>(t)); }

// Types whose tensor bytes are ONNX's stored bytes (not packed, not strings).
bool StoredAsIs(DType dtype) {
  return dtype != DType::kString && DTypeSize(dtype) > 0 && SubByteBits(dtype) == 0;
}

std::string BlobHeader(size_t bytes) {
  Writer w;
  w.Raw(kBlobMagic, sizeof kBlobMagic);
  w.U32(kBlobVersion);
  w.U32(0);
  w.I64(static_cast<int64_t>(bytes));
  w.out.resize(kBlobHeaderBytes, '\0');
  return std::move(w.out);
}

// Unique among this process's writers too (two threads storing one blob).
std::string TempName(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return absl::StrCat(path, ".tmp.", getpid(), ".", counter.fetch_add(1));
}

// Writes `parts` to `path` through a temporary file renamed into place.
absl::Status WriteAtomically(const std::string& path, std::initializer_list<std::string_view> parts,
                             const char* crash_point) {
  const std::string tmp = TempName(path);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    for (std::string_view p : parts) out.write(p.data(), static_cast<std::streamsize>(p.size()));
    if (!out.flush()) {
      std::error_code ec;
      fs::remove(tmp, ec);
      return absl::InternalError("engine cache: cannot write " + tmp);
    }
  }
  if (crash_point) CrashPoint(crash_point);
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return absl::InternalError("engine cache: cannot rename to " + path + ": " + ec.message());
  }
  return absl::OkStatus();
}

}  // namespace

std::string ContentHash(std::string_view bytes) {
  // Two 64-bit lanes over 8-byte words, each word pre-mixed, lanes crossed at the end; the
  // length goes into the finalization so a prefix never hashes like the whole.
  uint64_t h1 = 0x9e3779b97f4a7c15ULL, h2 = 0xc2b2ae3d27d4eb4fULL;
  size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, bytes.data() + i, 8);
    h1 = Rotl(h1 ^ Mix64(w), 27) * 0x87c37b91114253d5ULL + 0x52dce729;
    h2 = Rotl(h2 ^ Mix64(w + 0x4cf5ad432745937fULL), 31) * 0x4cf5ad432745937fULL + 0x38495ab5;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, bytes.data() + i, bytes.size() - i);
  h1 = Mix64(h1 ^ Mix64(tail) ^ bytes.size());
  h2 = Mix64(h2 ^ Mix64(tail ^ 0xff51afd7ed558ccdULL) ^ Rotl(bytes.size(), 32));
  h1 += h2;
  h2 += h1;
  char hex[33];
  std::snprintf(hex, sizeof hex, "%016llx%016llx", static_cast<unsigned long long>(h1),
                static_cast<unsigned long long>(h2));
  return hex;
}

// The level the kernels run at: a KILN_MAX_CPU_ISA cap changes layouts and kernels on the
// same CPU flags.
std::string IsaSuffix() {
#ifdef KILN_HAVE_CPU_ENGINE
  return std::string(":isa=") + cpu::IsaName(cpu::ActiveIsa()) + "/" + cpu::CpuIsa().onednn;
#else
  return "";
#endif
}

std::string DeviceFingerprint(const std::string& device) {
  // A GPU engine depends on the GPU (name, compute capability) and on the driver, CUDA,
  // cuDNN and cuBLAS versions that chose and compiled its kernels.
  if (const std::optional<int> gpu = cuda::ParseCudaDevice(device)) return cuda::CudaDeviceFingerprint(*gpu);
  if (device != "cpu") return device;
  // oneDNN dispatches on these flags at primitive creation, and prepacked layouts depend on
  // them; the model name is not enough (VMs mask flags).
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) == 0) return "cpu:" + ContentHash(line).substr(0, 16) + IsaSuffix();
  }
  return "cpu:unknown";
}

std::string EngineCacheKey::ToString() const {
  std::ostringstream os;
  os << "model=" << model_hash << ";compiler=" << compiler_version << ";options=" << options
     << ";device=" << device << ";batch=" << batch;
  return os.str();
}

size_t EngineCacheEntry::ApproxBytes() const {
  size_t n = graph_onnx.size() + report_json.size() + check_message.size() + engine_layout.size();
  for (const auto& [name, t] : outputs) n += name.size() + t.nbytes();
  for (const auto& [id, t] : blobs) n += id.size() + t.nbytes();  // they stay alive with it
  return n;
}

onnx_io::ExternalWriter BlobWriter(EngineCacheEntry& entry) {
  return [&entry](const Tensor& t) -> std::optional<std::string> {
    if (t.nbytes() < kBlobMinBytes || !StoredAsIs(t.dtype())) return std::nullopt;
    std::string id = ContentHash(std::string_view(static_cast<const char*>(t.raw()), t.nbytes()));
    if (!entry.blobs.count(id)) entry.blobs.emplace(id, BytesOf(t));
    return absl::StrCat(kBlobScheme, id);
  };
}

onnx_io::ExternalResolver BlobResolver(const EngineCacheEntry& entry) {
  return [&entry](const std::string& location, DType dtype,
                  const std::vector<int64_t>& dims) -> absl::StatusOr<Tensor> {
    if (location.rfind(kBlobScheme, 0) != 0) {
      return Corrupt("external data '" + location + "' is not a blob");
    }
    auto it = entry.blobs.find(location.substr(sizeof kBlobScheme - 1));
    if (it == entry.blobs.end()) return Corrupt("the graph names a blob it does not list");
    if (!StoredAsIs(dtype) || NumElements(dims) * DTypeSize(dtype) != it->second.nbytes()) {
      return Corrupt("blob " + it->first + " does not hold " + DTypeName(dtype) +
                     ShapeToString(dims));
    }
    auto holder = std::make_shared<Tensor>(it->second);
    void* data = holder->raw_mutable();
    return Tensor::View(dtype, dims, std::shared_ptr<void>(holder, data), data);
  };
}

absl::StatusOr<Tensor> MapBlob(const std::string& path, const std::string& id, size_t bytes) {
  ASSIGN_OR_RETURN(std::shared_ptr<const MappedFile> file, MappedFile::Open(path));
  const std::string_view all = file->bytes();
  if (all.size() != kBlobHeaderBytes + bytes || all.substr(0, kBlobHeaderBytes) != BlobHeader(bytes)) {
    return absl::DataLossError("engine cache blob " + path + ": not a blob of " +
                               std::to_string(bytes) + " bytes");
  }
  // The name is the hash of the bytes: this is the whole integrity check.
  if (ContentHash(all.substr(kBlobHeaderBytes)) != id) {
    return absl::DataLossError("engine cache blob " + path + ": checksum mismatch");
  }
  char* data = file->mutable_data() + kBlobHeaderBytes;
  return Tensor::View(DType::kUInt8, {static_cast<int64_t>(bytes)},
                      std::shared_ptr<void>(file, data), data);
}

std::string EncodeEntry(const EngineCacheKey& key, const EngineCacheEntry& e) {
  Writer w;
  w.Raw(kMagic, sizeof kMagic);
  w.U32(kFormatVersion);
  w.Str(key.ToString());
  w.Str(e.graph_onnx);
  w.U32(static_cast<uint32_t>(e.blobs.size()));
  for (const auto& [id, t] : e.blobs) {
    w.Str(id);
    w.I64(static_cast<int64_t>(t.nbytes()));
  }
  w.Str(e.report_json);
  w.U32(static_cast<uint32_t>(e.disabled_passes.size()));
  for (const std::string& p : e.disabled_passes) w.Str(p);
  w.Str(e.check_message);
  w.F64(e.max_abs_err);
  w.F64(e.max_rel_err);
  w.F64(e.norm_rel_err);
  w.U32(e.checked ? 1 : 0);
  w.U32(static_cast<uint32_t>(e.outputs.size()));
  for (const auto& [name, t] : e.outputs) WriteTensor(w, name, t);
  w.Str(e.engine_layout);
  w.U32(static_cast<uint32_t>(e.engine_threads));
  w.out += ContentHash(w.out);
  return std::move(w.out);
}

absl::StatusOr<EngineCacheEntry> DecodeEntry(std::string_view bytes,
                                             const EngineCacheKey& expected,
                                             const BlobLoader& load_blob) {
  if (bytes.size() < sizeof kMagic + kChecksumBytes ||
      std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) {
    return Corrupt("not a Kiln engine cache file");
  }
  const std::string_view body = bytes.substr(0, bytes.size() - kChecksumBytes);
  if (ContentHash(body) != bytes.substr(body.size())) return Corrupt("checksum mismatch");
  Reader r(body.substr(sizeof kMagic));
  uint32_t version = 0, n = 0, checked = 0;
  std::string key;
  if (!r.U32(version) || version != kFormatVersion) return Corrupt("other format version");
  if (!r.Str(key)) return Corrupt("truncated key");
  if (key != expected.ToString()) return Corrupt("stale key '" + key + "'");
  EngineCacheEntry e;
  if (!r.Str(e.graph_onnx) || !r.U32(n)) return Corrupt("truncated");
  for (uint32_t i = 0; i < n; ++i) {
    std::string id;
    int64_t size = 0;
    if (!r.Str(id) || !r.I64(size) || size < 0) return Corrupt("truncated blob list");
    absl::StatusOr<Tensor> blob = load_blob(id, static_cast<size_t>(size));
    if (!blob.ok()) return Corrupt("blob " + id + ": " + std::string(blob.status().message()));
    e.blobs.emplace(std::move(id), *std::move(blob));
  }
  if (!r.Str(e.report_json) || !r.U32(n)) return Corrupt("truncated");
  for (uint32_t i = 0; i < n; ++i) {
    std::string p;
    if (!r.Str(p)) return Corrupt("truncated pass list");
    e.disabled_passes.insert(std::move(p));
  }
  if (!r.Str(e.check_message) || !r.F64(e.max_abs_err) || !r.F64(e.max_rel_err) ||
      !r.F64(e.norm_rel_err) || !r.U32(checked) || !r.U32(n)) {
    return Corrupt("truncated check result");
  }
  e.checked = checked != 0;
  for (uint32_t i = 0; i < n; ++i) {
    std::string name;
    Tensor t;
    if (!ReadTensor(r, name, t)) return Corrupt("bad output tensor");
    e.outputs.emplace_back(std::move(name), std::move(t));
  }
  uint32_t threads = 0;
  if (!r.Str(e.engine_layout) || !r.U32(threads) || threads > 2) {
    return Corrupt("truncated engine layout");
  }
  e.engine_threads = static_cast<EngineCacheEntry::Threads>(threads);
  if (!r.done()) return Corrupt("trailing bytes");
  return e;
}

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
      if (name.find(".kec.tmp.") == std::string::npos &&
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
  RETURN_IF_ERROR(WriteAtomically(
      path, {header, std::string_view(static_cast<const char*>(bytes.raw()), bytes.nbytes())},
      nullptr));
  std::lock_guard<std::mutex> lk(mu_);
  ++stats_.blobs_written;
  return absl::OkStatus();
}

EngineCache::Stats EngineCache::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

void EngineCache::RememberLocked(const std::string& id,
                                 std::shared_ptr<const EngineCacheEntry> e) {
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
  auto entry = DecodeEntry(ReadWholeFile(path).value_or(""), key,
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
  return WriteAtomically(path, {EncodeEntry(key, *shared)}, "cache-written");
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

#include "server/model/engine_cache_format.h"

#include <cstring>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "kiln/cache/engine_cache.pb.h"
#include "server/common/mapped_file.h"

namespace kiln::server {
namespace {

constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'E', 'C', '\0', '\1'};
// 2: the engine's layout. 3: constants of kBlobMinBytes or more in shared blob files.
// 4: norm_rel_err. 5: the entry a kiln.cache.Entry message, hashes XXH3-128.
constexpr uint32_t kFormatVersion = 5;
constexpr size_t kVersionBytes = sizeof(uint32_t);
constexpr size_t kChecksumBytes = 32;  // the hex ContentHash of everything before it
constexpr char kBlobMagic[8] = {'K', 'I', 'L', 'N', 'B', 'L', 'B', '\1'};
constexpr uint32_t kBlobVersion = 1;

absl::Status Corrupt(const std::string& why) {
  return absl::DataLossError("engine cache entry: " + why);
}

Tensor BytesOf(const Tensor& t) { return BytesView(std::make_shared<const Tensor>(t)); }

// Types whose tensor bytes are ONNX's stored bytes (not packed, not strings).
bool StoredAsIs(DType dtype) {
  return dtype != DType::kString && DTypeSize(dtype) > 0 && SubByteBits(dtype) == 0;
}

void PutTensor(const std::string& name, const Tensor& t, cache::StoredTensor& out) {
  out.set_name(name);
  out.set_dtype(static_cast<int32_t>(t.dtype()));
  for (int64_t d : t.shape()) out.add_shape(d);
  out.set_data(static_cast<const char*>(t.raw()), t.nbytes());
}

absl::StatusOr<Tensor> GetTensor(const cache::StoredTensor& in) {
  if (in.shape_size() > 16) return Corrupt("output '" + in.name() + "' has rank > 16");
  std::vector<int64_t> shape(in.shape().begin(), in.shape().end());
  for (int64_t d : shape) {
    if (d < 0) return Corrupt("output '" + in.name() + "' has a negative dim");
  }
  const auto dtype = static_cast<DType>(in.dtype());
  // Byte-stored and packed sub-byte types; never strings (the checksum makes any other
  // value a writer's bug, but a bad dtype must not reach the tensor's constructor).
  if (dtype == DType::kString || (DTypeSize(dtype) == 0 && SubByteBits(dtype) == 0)) {
    return Corrupt("output '" + in.name() + "' has an unknown dtype");
  }
  Tensor t(dtype, shape);
  if (t.nbytes() != in.data().size()) {
    return Corrupt("output '" + in.name() + "' does not hold its dtype and shape");
  }
  std::memcpy(t.raw_mutable(), in.data().data(), in.data().size());
  return t;
}

}  // namespace

Tensor BytesView(std::shared_ptr<const Tensor> t) {
  void* data = const_cast<void*>(t->raw());
  const auto n = static_cast<int64_t>(t->nbytes());
  return Tensor::View(DType::kUInt8, {n}, std::shared_ptr<void>(std::move(t), data), data);
}

std::string BlobHeader(size_t bytes) {
  std::string header(kBlobHeaderBytes, '\0');
  const auto n = static_cast<int64_t>(bytes);
  std::memcpy(header.data(), kBlobMagic, sizeof kBlobMagic);
  std::memcpy(header.data() + 8, &kBlobVersion, sizeof kBlobVersion);
  std::memcpy(header.data() + 16, &n, sizeof n);  // little endian, as the hosts Kiln runs on
  return header;
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
  if (all.size() != kBlobHeaderBytes + bytes ||
      all.substr(0, kBlobHeaderBytes) != BlobHeader(bytes)) {
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
  cache::Entry m;
  m.set_key(key.ToString());
  m.set_graph_onnx(e.graph_onnx);
  for (const auto& [id, t] : e.blobs) {
    cache::BlobRef* b = m.add_blobs();
    b->set_id(id);
    b->set_bytes(static_cast<int64_t>(t.nbytes()));
  }
  m.set_report_json(e.report_json);
  for (const std::string& p : e.disabled_passes) m.add_disabled_passes(p);
  m.set_check_message(e.check_message);
  m.set_max_abs_err(e.max_abs_err);
  m.set_max_rel_err(e.max_rel_err);
  m.set_norm_rel_err(e.norm_rel_err);
  m.set_checked(e.checked);
  for (const auto& [name, t] : e.outputs) PutTensor(name, t, *m.add_outputs());
  m.set_engine_layout(e.engine_layout);
  m.set_engine_threads(static_cast<uint32_t>(e.engine_threads));
  std::string out(kMagic, sizeof kMagic);
  out.append(reinterpret_cast<const char*>(&kFormatVersion), kVersionBytes);
  m.AppendToString(&out);
  out += ContentHash(out);
  return out;
}

absl::StatusOr<EngineCacheEntry> DecodeEntry(std::string_view bytes, const EngineCacheKey& expected,
                                             const BlobLoader& load_blob) {
  constexpr size_t kHeader = sizeof kMagic + kVersionBytes;
  if (bytes.size() < kHeader + kChecksumBytes ||
      std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) {
    return Corrupt("not a Kiln engine cache file");
  }
  const std::string_view body = bytes.substr(0, bytes.size() - kChecksumBytes);
  if (ContentHash(body) != bytes.substr(body.size())) return Corrupt("checksum mismatch");
  uint32_t version = 0;
  std::memcpy(&version, bytes.data() + sizeof kMagic, kVersionBytes);
  if (version != kFormatVersion) return Corrupt("other format version");
  cache::Entry m;
  const std::string_view message = body.substr(kHeader);
  if (!m.ParseFromArray(message.data(), static_cast<int>(message.size()))) {
    return Corrupt("not an entry message");
  }
  if (m.key() != expected.ToString()) return Corrupt("stale key '" + m.key() + "'");
  if (m.engine_threads() > 2) return Corrupt("unknown thread choice");
  EngineCacheEntry e;
  e.graph_onnx = m.graph_onnx();
  for (const cache::BlobRef& b : m.blobs()) {
    if (b.bytes() < 0) return Corrupt("blob " + b.id() + " has a negative size");
    absl::StatusOr<Tensor> blob = load_blob(b.id(), static_cast<size_t>(b.bytes()));
    if (!blob.ok()) return Corrupt("blob " + b.id() + ": " + std::string(blob.status().message()));
    e.blobs.emplace(b.id(), *std::move(blob));
  }
  e.report_json = m.report_json();
  e.disabled_passes.insert(m.disabled_passes().begin(), m.disabled_passes().end());
  e.check_message = m.check_message();
  e.max_abs_err = m.max_abs_err();
  e.max_rel_err = m.max_rel_err();
  e.norm_rel_err = m.norm_rel_err();
  e.checked = m.checked();
  for (const cache::StoredTensor& t : m.outputs()) {
    ASSIGN_OR_RETURN(Tensor value, GetTensor(t));
    e.outputs.emplace_back(t.name(), std::move(value));
  }
  e.engine_layout = m.engine_layout();
  e.engine_threads = static_cast<EngineCacheEntry::Threads>(m.engine_threads());
  return e;
}

}  // namespace kiln::server

#include "compiler/onnx/tensor_proto.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "base/file.h"

namespace kiln::onnx_io {
namespace {

namespace fs = std::filesystem;

absl::StatusOr<std::vector<int64_t>> CheckedDims(const onnx::TensorProto& proto, DType dtype,
                                                 size_t max_bytes) {
  std::vector<int64_t> dims(proto.dims().begin(), proto.dims().end());
  const size_t es = DTypeSize(dtype);
  unsigned __int128 bytes = es;
  for (int64_t d : dims) {
    if (d < 0) {
      return absl::InvalidArgumentError("tensor '" + proto.name() + "' has negative dim " +
                                        std::to_string(d));
    }
    bytes *= static_cast<unsigned __int128>(d);
    if (bytes > max_bytes) {
      return absl::ResourceExhaustedError("tensor '" + proto.name() + "' is larger than " +
                                          std::to_string(max_bytes) + " bytes");
    }
  }
  return dims;
}

// Bytes the tensor takes in ONNX's stored form: int4/uint4/float4 pack two elements per
// byte and int2/uint2 four, low bits first; every other type is its in-memory size.
size_t StoredBytes(DType dtype, int64_t numel) {
  const int bits = SubByteBits(dtype);
  if (bits == 0) return static_cast<size_t>(numel) * DTypeSize(dtype);
  return (static_cast<size_t>(numel) * static_cast<size_t>(bits) + 7) / 8;
}

// Fills t from its stored form (see StoredBytes), unpacking sub-byte types to one byte per
// element: signed integers sign-extended, float4 codes in the low nibble.
void FillFromStored(const char* stored, Tensor& t) {
  const int bits = SubByteBits(t.dtype());
  if (bits == 0) {
    if (t.nbytes()) std::memcpy(t.raw_mutable(), stored, t.nbytes());
    return;
  }
  const auto* in = reinterpret_cast<const uint8_t*>(stored);
  auto* out = t.mutable_data<uint8_t>();
  const unsigned mask = (1u << bits) - 1;
  const bool is_int = t.dtype() != DType::kFloat4E2M1;
  for (int64_t i = 0; i < t.numel(); ++i) {
    const int64_t bit = i * bits;
    const unsigned v = (in[bit / 8] >> (bit % 8)) & mask;
    out[i] = is_int ? static_cast<uint8_t>(WrapNarrowInt(t.dtype(), v)) : static_cast<uint8_t>(v);
  }
}

// The inverse of FillFromStored: t's elements in ONNX's stored (packed) form.
std::string ToStored(const Tensor& t) {
  const int bits = SubByteBits(t.dtype());
  if (bits == 0) return std::string(static_cast<const char*>(t.raw()), t.nbytes());
  std::string out(StoredBytes(t.dtype(), t.numel()), '\0');
  const auto* in = t.data<uint8_t>();
  const unsigned mask = (1u << bits) - 1;
  for (int64_t i = 0; i < t.numel(); ++i) {
    const int64_t bit = i * bits;
    out[bit / 8] = static_cast<char>(static_cast<uint8_t>(out[bit / 8]) |
                                     ((in[i] & mask) << (bit % 8)));
  }
  return out;
}

// Resolves an external data location inside base_dir; anything escaping it is rejected.
absl::StatusOr<fs::path> ResolveExternal(const std::string& name, const std::string& location,
                                         const std::string& base_dir) {
  if (base_dir.empty()) {
    return absl::InvalidArgumentError("tensor '" + name +
                                      "' uses external data but the model has no folder");
  }
  fs::path rel(location);
  if (location.empty() || rel.is_absolute()) {
    return absl::InvalidArgumentError("tensor '" + name + "': external data location '" + location +
                                      "' must be a relative path");
  }
  std::error_code ec;
  fs::path base = fs::weakly_canonical(fs::path(base_dir), ec);
  fs::path full = fs::weakly_canonical(base / rel, ec);
  if (ec) return absl::InvalidArgumentError("tensor '" + name + "': bad external data path");
  auto [b_end, f_it] = std::mismatch(base.begin(), base.end(), full.begin(), full.end());
  if (b_end != base.end()) {
    return absl::InvalidArgumentError("tensor '" + name + "': external data location '" + location +
                                      "' escapes the model's folder");
  }
  return full;
}

bool PreadAll(int fd, char* dst, size_t n, int64_t offset) {
  size_t done = 0;
  while (done < n) {
    const ssize_t got = ::pread(fd, dst + done, n - done, offset + static_cast<int64_t>(done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    done += static_cast<size_t>(got);
  }
  return true;
}

// Reads external data; the file's size is checked before the tensor is allocated, so a model
// that promises gigabytes the file does not hold costs nothing.
absl::StatusOr<Tensor> ReadExternal(const onnx::TensorProto& proto,
                                    const TensorReadOptions& options, DType dtype,
                                    const std::vector<int64_t>& dims, size_t nbytes) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : proto.external_data()) {
    try {
      if (kv.key() == "location") location = kv.value();
      if (kv.key() == "offset") offset = std::stoll(kv.value());
      if (kv.key() == "length") length = std::stoll(kv.value());
    } catch (const std::exception&) {
      return absl::InvalidArgumentError("tensor '" + proto.name() + "': bad external_data " +
                                        kv.key());
    }
  }
  ASSIGN_OR_RETURN(fs::path path, ResolveExternal(proto.name(), location, options.base_dir));
  if (offset < 0 || (length >= 0 && static_cast<size_t>(length) != nbytes)) {
    return absl::InvalidArgumentError("tensor '" + proto.name() +
                                      "': external data offset/length do not match its size");
  }
  // Errors name the location as the model wrote it, not the server's path to it.
  const std::string where = "tensor '" + proto.name() + "': external data '" + location + "'";
  const int fd = OpenRegularFile(path.string());
  if (fd < 0) {
    if (errno == EINVAL) return absl::InvalidArgumentError(where + " is not a regular file");
    return absl::NotFoundError(where + " not found");
  }
  struct stat st;
  const int64_t size = ::fstat(fd, &st) == 0 ? st.st_size : -1;
  // Compared as size - offset so a hostile offset near INT64_MAX cannot overflow.
  if (size < 0 || offset > size || static_cast<uint64_t>(size - offset) < nbytes) {
    ::close(fd);
    return absl::InvalidArgumentError(where + " is too short");
  }
  Tensor t(dtype, dims);
  std::string packed(SubByteBits(dtype) == 0 ? 0 : nbytes, '\0');
  char* dst = SubByteBits(dtype) == 0 ? static_cast<char*>(t.raw_mutable()) : packed.data();
  const bool whole = PreadAll(fd, dst, nbytes, offset);
  ::close(fd);
  // The file shrank or failed under the read: what was checked above no longer holds.
  if (!whole) return absl::DataLossError(where + ": the read failed or ended early");
  if (!packed.empty()) FillFromStored(packed.data(), t);
  return t;
}

std::string LocationOf(const onnx::TensorProto& proto) {
  std::string location;
  for (const auto& kv : proto.external_data()) {
    if (kv.key() == "location") location = kv.value();
  }
  return location;
}

bool HasScheme(const onnx::TensorProto& proto, const std::string& scheme) {
  return LocationOf(proto).rfind(scheme, 0) == 0;
}

// External data through the caller's resolver; its answer is checked like a file's size.
absl::StatusOr<Tensor> ResolveWithHook(const onnx::TensorProto& proto,
                                       const TensorReadOptions& options, DType dtype,
                                       const std::vector<int64_t>& dims) {
  const std::string location = LocationOf(proto);
  absl::StatusOr<Tensor> resolved = options.external(location, dtype, dims);
  if (!resolved.ok()) {
    return absl::Status(resolved.status().code(), "tensor '" + proto.name() + "': " +
                                                      std::string(resolved.status().message()));
  }
  Tensor t = *std::move(resolved);
  if (t.dtype() != dtype || t.shape() != dims) {
    return absl::DataLossError("tensor '" + proto.name() + "': external data '" + location +
                               "' resolved to " + DTypeName(t.dtype()) + ShapeToString(t.shape()));
  }
  return t;
}

absl::Status SizeMismatch(const onnx::TensorProto& proto, size_t got, int64_t want) {
  return absl::InvalidArgumentError("tensor '" + proto.name() + "' holds " + std::to_string(got) +
                                    " values but its dims " + "need " + std::to_string(want));
}

// Copies a typed repeated field (float_data, int32_data, ...) into t.
template <class Field>
absl::Status CopyTyped(const onnx::TensorProto& proto, const Field& field, Tensor& t) {
  if (static_cast<int64_t>(field.size()) != t.numel()) {
    return SizeMismatch(proto, field.size(), t.numel());
  }
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (t.dtype()) {
      case DType::kFloat16:
      case DType::kBFloat16:
        t.mutable_data<uint16_t>()[i] = static_cast<uint16_t>(field.Get(i));
        break;
      case DType::kUInt64:
        t.mutable_data<uint64_t>()[i] = static_cast<uint64_t>(field.Get(i));
        break;
      case DType::kFloat32:
      case DType::kFloat64:
        t.SetDouble(i, static_cast<double>(field.Get(i)));
        break;
      default:
        t.SetInt(i, static_cast<int64_t>(field.Get(i)));
        break;
    }
  }
  return absl::OkStatus();
}

// How many values the typed field that holds `dtype` has (ONNX's storage rules).
int64_t TypedDataCount(const onnx::TensorProto& proto, DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return proto.float_data_size();
    case DType::kFloat64:
      return proto.double_data_size();
    case DType::kInt64:
      return proto.int64_data_size();
    case DType::kUInt32:
    case DType::kUInt64:
      return proto.uint64_data_size();
    default:
      return proto.int32_data_size();
  }
}

absl::Status CopyTypedData(const onnx::TensorProto& proto, Tensor& t) {
  if (IsNarrowDType(t.dtype())) {
    // int32_data holds the stored bytes, one per value: float8 bit patterns, or packed
    // pairs/quads of sub-byte elements. (The count was checked against StoredBytes.)
    std::string stored(proto.int32_data_size(), '\0');
    for (int i = 0; i < proto.int32_data_size(); ++i) {
      stored[i] = static_cast<char>(proto.int32_data(i) & 0xff);
    }
    FillFromStored(stored.data(), t);
    return absl::OkStatus();
  }
  switch (t.dtype()) {
    case DType::kFloat32:
      return CopyTyped(proto, proto.float_data(), t);
    case DType::kFloat64:
      return CopyTyped(proto, proto.double_data(), t);
    case DType::kInt64:
      return CopyTyped(proto, proto.int64_data(), t);
    case DType::kUInt32:
    case DType::kUInt64:
      return CopyTyped(proto, proto.uint64_data(), t);
    default:
      return CopyTyped(proto, proto.int32_data(), t);
  }
}

}  // namespace

absl::Status CheckElemType(int32_t elem_type, const std::string& what) {
  if (IsValidOnnxDType(elem_type)) return absl::OkStatus();
  // ONNX keeps adding element types (24: float8e8m0, 25/26: uint2/int2, ...); a model using
  // one is valid, just beyond Kiln. Far larger numbers are corruption.
  constexpr int32_t kPlausibleOnnxTypes = 64;
  if (elem_type > 0 && elem_type < kPlausibleOnnxTypes) {
    return absl::UnimplementedError(what + " has ONNX element type " + std::to_string(elem_type) +
                                    ", which Kiln does not support");
  }
  return absl::InvalidArgumentError(what + " has invalid element type " +
                                    std::to_string(elem_type));
}

absl::StatusOr<Tensor> TensorFromProto(const onnx::TensorProto& proto,
                                       const TensorReadOptions& options) {
  if (!proto.has_data_type()) {
    return absl::InvalidArgumentError("tensor '" + proto.name() + "' has no data_type");
  }
  RETURN_IF_ERROR(CheckElemType(proto.data_type(), "tensor '" + proto.name() + "'"));
  const DType dtype = static_cast<DType>(proto.data_type());
  if (!IsSupportedDType(dtype)) {
    return absl::UnimplementedError("tensor '" + proto.name() + "' has dtype " + DTypeName(dtype) +
                                    ", which Kiln does not support");
  }
  if (proto.has_segment()) {
    return absl::UnimplementedError("tensor '" + proto.name() + "' is segmented");
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> dims, CheckedDims(proto, dtype, options.max_bytes));
  // Sizes are checked against what the proto really holds before anything is allocated.
  const int64_t numel = NumElements(dims);
  const size_t nbytes = StoredBytes(dtype, numel);
  if (proto.data_location() == onnx::TensorProto::EXTERNAL) {
    if (options.external && HasScheme(proto, options.external_scheme)) {
      return ResolveWithHook(proto, options, dtype, dims);
    }
    return ReadExternal(proto, options, dtype, dims, nbytes);
  }
  if (proto.has_raw_data()) {
    if (proto.raw_data().size() != nbytes) {
      return absl::InvalidArgumentError("tensor '" + proto.name() + "' raw_data has " +
                                        std::to_string(proto.raw_data().size()) +
                                        " bytes but dims " + ShapeToString(dims) + " of " +
                                        DTypeName(dtype) + " need " + std::to_string(nbytes));
    }
    // FillFromStored writes every element: zeroing first would touch the pages twice.
    Tensor t = Tensor::Uninitialized(dtype, dims);
    FillFromStored(proto.raw_data().data(), t);
    return t;
  }
  // Narrow types store one int32 per stored byte, so sub-byte tensors hold fewer values.
  const int64_t want = IsNarrowDType(dtype) ? static_cast<int64_t>(nbytes) : numel;
  if (TypedDataCount(proto, dtype) != want) {
    return SizeMismatch(proto, static_cast<size_t>(TypedDataCount(proto, dtype)), want);
  }
  Tensor t(dtype, dims);
  RETURN_IF_ERROR(CopyTypedData(proto, t));
  return t;
}

absl::StatusOr<Tensor> TensorFromStored(std::string_view stored, DType dtype,
                                        const std::vector<int64_t>& dims) {
  for (int64_t d : dims) {
    if (d < 0) return absl::InvalidArgumentError("negative dim " + std::to_string(d));
  }
  if (dtype == DType::kString || DTypeSize(dtype) == 0) {
    return absl::InvalidArgumentError(std::string("no stored form for ") + DTypeName(dtype));
  }
  const size_t nbytes = StoredBytes(dtype, NumElements(dims));
  if (stored.size() != nbytes) {
    return absl::InvalidArgumentError("raw_data has " + std::to_string(stored.size()) +
                                      " bytes but dims " + ShapeToString(dims) + " of " +
                                      DTypeName(dtype) + " need " + std::to_string(nbytes));
  }
  Tensor t = Tensor::Uninitialized(dtype, dims);  // FillFromStored writes every element
  FillFromStored(stored.data(), t);
  return t;
}

onnx::TensorProto TensorToProto(const Tensor& t, const std::string& name) {
  onnx::TensorProto p;
  p.set_name(name);
  p.set_data_type(static_cast<int32_t>(t.dtype()));
  for (int64_t d : t.shape()) p.add_dims(d);
  p.set_raw_data(ToStored(t));
  return p;
}

absl::StatusOr<Tensor> ReadTensorFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError("cannot open " + path);
  onnx::TensorProto proto;
  if (!proto.ParseFromIstream(&f)) {
    return absl::InvalidArgumentError(path + " is not a serialized onnx.TensorProto");
  }
  TensorReadOptions opts;
  opts.base_dir = fs::path(path).parent_path().string();
  return TensorFromProto(proto, opts);
}

absl::Status WriteTensorFile(const Tensor& t, const std::string& name, const std::string& path) {
  std::ofstream f(path, std::ios::binary);
  if (!f || !TensorToProto(t, name).SerializeToOstream(&f)) {
    return absl::InternalError("cannot write " + path);
  }
  return absl::OkStatus();
}

}  // namespace kiln::onnx_io

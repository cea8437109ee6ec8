#include "server/serving/kserve_tensor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/common/echo.h"

namespace kiln::server::kserve {
namespace {

struct TypeRow {
  DType dtype;
  const char* name;
  inference::DataType config;
};

// The protocol's datatypes that Kiln tensors hold (BYTES is the one it has and Kiln lacks).
constexpr TypeRow kTypes[] = {
    {DType::kBool, "BOOL", inference::TYPE_BOOL},
    {DType::kUInt8, "UINT8", inference::TYPE_UINT8},
    {DType::kUInt16, "UINT16", inference::TYPE_UINT16},
    {DType::kUInt32, "UINT32", inference::TYPE_UINT32},
    {DType::kUInt64, "UINT64", inference::TYPE_UINT64},
    {DType::kInt8, "INT8", inference::TYPE_INT8},
    {DType::kInt16, "INT16", inference::TYPE_INT16},
    {DType::kInt32, "INT32", inference::TYPE_INT32},
    {DType::kInt64, "INT64", inference::TYPE_INT64},
    {DType::kFloat16, "FP16", inference::TYPE_FP16},
    {DType::kBFloat16, "BF16", inference::TYPE_BF16},
    {DType::kFloat32, "FP32", inference::TYPE_FP32},
    {DType::kFloat64, "FP64", inference::TYPE_FP64},
};

bool IsUnsigned(DType t) {
  return t == DType::kUInt8 || t == DType::kUInt16 || t == DType::kUInt32 || t == DType::kUInt64;
}

// The inclusive range of an integer dtype, as int64 (signed) or uint64 (unsigned) bounds.
int64_t SignedMin(DType t) {
  switch (t) {
    case DType::kInt8:
      return std::numeric_limits<int8_t>::min();
    case DType::kInt16:
      return std::numeric_limits<int16_t>::min();
    case DType::kInt32:
      return std::numeric_limits<int32_t>::min();
    default:
      return std::numeric_limits<int64_t>::min();
  }
}
int64_t SignedMax(DType t) {
  switch (t) {
    case DType::kInt8:
      return std::numeric_limits<int8_t>::max();
    case DType::kInt16:
      return std::numeric_limits<int16_t>::max();
    case DType::kInt32:
      return std::numeric_limits<int32_t>::max();
    default:
      return std::numeric_limits<int64_t>::max();
  }
}
uint64_t UnsignedMax(DType t) {
  switch (t) {
    case DType::kUInt8:
      return std::numeric_limits<uint8_t>::max();
    case DType::kUInt16:
      return std::numeric_limits<uint16_t>::max();
    case DType::kUInt32:
      return std::numeric_limits<uint32_t>::max();
    default:
      return std::numeric_limits<uint64_t>::max();
  }
}

absl::Status OutOfRange(const std::string& what, DType t, const std::string& value, int64_t index) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": element ", index, " (", value,
                                                 ") is out of the ", DataTypeName(t), " range"));
}

absl::Status CountMismatch(const std::string& what, const std::string& field, int64_t got,
                           const std::vector<int64_t>& shape, int64_t want) {
  return absl::InvalidArgumentError(absl::StrCat(
      what, ": ", field, " has ", got, " elements, shape ", ShapeToString(shape), " needs ", want));
}

// The contents field a dtype must use; null for FP16/BF16, which travel raw only.
const char* ContentsFieldFor(DType t) {
  switch (t) {
    case DType::kBool:
      return "bool_contents";
    case DType::kInt8:
    case DType::kInt16:
    case DType::kInt32:
      return "int_contents";
    case DType::kInt64:
      return "int64_contents";
    case DType::kUInt8:
    case DType::kUInt16:
    case DType::kUInt32:
      return "uint_contents";
    case DType::kUInt64:
      return "uint64_contents";
    case DType::kFloat32:
      return "fp32_contents";
    case DType::kFloat64:
      return "fp64_contents";
    default:
      return nullptr;
  }
}

// Every non-empty field of `c`, with its length.
std::vector<std::pair<const char*, int>> FilledFields(const inference::InferTensorContents& c) {
  std::vector<std::pair<const char*, int>> out;
  auto see = [&](const char* name, int n) {
    if (n > 0) out.emplace_back(name, n);
  };
  see("bool_contents", c.bool_contents_size());
  see("int_contents", c.int_contents_size());
  see("int64_contents", c.int64_contents_size());
  see("uint_contents", c.uint_contents_size());
  see("uint64_contents", c.uint64_contents_size());
  see("fp32_contents", c.fp32_contents_size());
  see("fp64_contents", c.fp64_contents_size());
  see("bytes_contents", c.bytes_contents_size());
  return out;
}

// Copies the dtype's field of `c` into `t` (whose element count the caller checked).
absl::Status FillFromContents(const inference::InferTensorContents& c, const std::string& what,
                              Tensor& t) {
  const DType d = t.dtype();
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (d) {
      case DType::kBool:
        t.mutable_data<uint8_t>()[i] = c.bool_contents(i) ? 1 : 0;
        break;
      case DType::kInt8:
      case DType::kInt16:
      case DType::kInt32: {
        const int64_t v = c.int_contents(i);
        if (v < SignedMin(d) || v > SignedMax(d)) return OutOfRange(what, d, absl::StrCat(v), i);
        t.SetInt(i, v);
        break;
      }
      case DType::kInt64:
        t.mutable_data<int64_t>()[i] = c.int64_contents(i);
        break;
      case DType::kUInt8:
      case DType::kUInt16:
      case DType::kUInt32: {
        const uint64_t v = c.uint_contents(i);
        if (v > UnsignedMax(d)) return OutOfRange(what, d, absl::StrCat(v), i);
        t.SetUInt(i, v);
        break;
      }
      case DType::kUInt64:
        t.mutable_data<uint64_t>()[i] = c.uint64_contents(i);
        break;
      case DType::kFloat32:
        t.mutable_data<float>()[i] = c.fp32_contents(i);
        break;
      case DType::kFloat64:
        t.mutable_data<double>()[i] = c.fp64_contents(i);
        break;
      default:
        return absl::InternalError("FillFromContents: dtype without a contents field");
    }
  }
  return absl::OkStatus();
}

// Leaves of a (possibly nested) JSON array, or -1 when something other than an array or a
// scalar appears; nesting is bounded by the parser's depth limit.
int64_t CountLeaves(const json::Value& v) {
  if (!v.is_array()) return v.is_object() ? -1 : 1;
  int64_t n = 0;
  for (const json::Value& item : v.items()) {
    const int64_t k = CountLeaves(item);
    if (k < 0) return -1;
    n += k;
  }
  return n;
}

absl::Status SetFromJson(const json::Value& v, const std::string& what, int64_t i, Tensor& t) {
  const DType d = t.dtype();
  const std::string elem = absl::StrCat(what, ": element ", i);
  if (d == DType::kBool) {
    if (v.kind() != json::Kind::kBool) {
      return absl::InvalidArgumentError(absl::StrCat(elem, ": BOOL data must be true or false"));
    }
    t.mutable_data<uint8_t>()[i] = v.boolean() ? 1 : 0;
  } else if (IsFloatDType(d)) {
    ASSIGN_OR_RETURN(const double x, json::AsDouble(v, elem));
    t.SetDouble(i, x);
  } else if (IsUnsigned(d)) {
    ASSIGN_OR_RETURN(const uint64_t x, json::AsUInt64(v, elem));
    if (x > UnsignedMax(d)) return OutOfRange(what, d, v.text(), i);
    t.SetUInt(i, x);
  } else {
    ASSIGN_OR_RETURN(const int64_t x, json::AsInt64(v, elem));
    if (x < SignedMin(d) || x > SignedMax(d)) return OutOfRange(what, d, v.text(), i);
    t.SetInt(i, x);
  }
  return absl::OkStatus();
}

absl::Status FillFromJson(const json::Value& v, const std::string& what, int64_t& i, Tensor& t) {
  if (!v.is_array()) return SetFromJson(v, what, i++, t);
  for (const json::Value& item : v.items()) RETURN_IF_ERROR(FillFromJson(item, what, i, t));
  return absl::OkStatus();
}

}  // namespace

std::string DataTypeName(DType t) {
  for (const TypeRow& r : kTypes) {
    if (r.dtype == t) return r.name;
  }
  return "";
}

inference::DataType ConfigDataType(DType t) {
  for (const TypeRow& r : kTypes) {
    if (r.dtype == t) return r.config;
  }
  return inference::TYPE_INVALID;
}

absl::StatusOr<DType> ParseDataType(std::string_view name, const std::string& what) {
  for (const TypeRow& r : kTypes) {
    if (r.name == name) return r.dtype;
  }
  if (name == "BYTES") {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": datatype BYTES: Kiln models take numeric tensors only"));
  }
  std::vector<std::string> names;
  for (const TypeRow& r : kTypes) names.push_back(r.name);
  return absl::InvalidArgumentError(absl::StrCat(what, ": unknown datatype '", EchoName(name),
                                                 "'; one of ", absl::StrJoin(names, ", ")));
}

absl::StatusOr<Tensor> FromRawBytes(DType dtype, std::vector<int64_t> shape,
                                    std::shared_ptr<std::string> owner, std::string_view bytes,
                                    const std::string& what) {
  ASSIGN_OR_RETURN(const int64_t n, CheckedElementCount(shape, what));
  const size_t need = static_cast<size_t>(n) * DTypeSize(dtype);
  if (bytes.size() != need) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", bytes.size(), " bytes of data, ",
                                                   DataTypeName(dtype), ShapeToString(shape),
                                                   " needs ", need));
  }
  if (need > 0 && reinterpret_cast<uintptr_t>(bytes.data()) % DTypeSize(dtype) == 0) {
    return Tensor::View(dtype, std::move(shape), std::move(owner), const_cast<char*>(bytes.data()));
  }
  Tensor t = Tensor::Uninitialized(dtype, std::move(shape));  // misaligned (or empty): copy
  if (need > 0) std::memcpy(t.raw_mutable(), bytes.data(), need);
  return t;
}

absl::StatusOr<Tensor> FromContents(DType dtype, std::vector<int64_t> shape,
                                    const inference::InferTensorContents& contents,
                                    const std::string& what) {
  ASSIGN_OR_RETURN(const int64_t n, CheckedElementCount(shape, what));
  const char* want = ContentsFieldFor(dtype);
  const auto filled = FilledFields(contents);
  for (const auto& [field, size] : filled) {
    if (want == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": ", DataTypeName(dtype),
                                                     " has no contents field: send it in "
                                                     "raw_input_contents"));
    }
    if (std::string_view(field) != want) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": contents.", field,
                                                     " does not match datatype ",
                                                     DataTypeName(dtype), " (use ", want, ")"));
    }
    if (size != n) return CountMismatch(what, absl::StrCat("contents.", field), size, shape, n);
  }
  if (filled.empty() && n > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": no data (neither contents nor raw_input_contents)"));
  }
  Tensor t = Tensor::Uninitialized(dtype, std::move(shape));  // every element is written
  RETURN_IF_ERROR(FillFromContents(contents, what, t));
  return t;
}

bool HasContents(const inference::InferTensorContents& contents) {
  return !FilledFields(contents).empty();
}

absl::StatusOr<Tensor> FromJsonData(DType dtype, std::vector<int64_t> shape,
                                    const json::Value& data, const std::string& what) {
  ASSIGN_OR_RETURN(const int64_t n, CheckedElementCount(shape, what));
  if (!data.is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": 'data' must be an array"));
  }
  const int64_t got = CountLeaves(data);
  if (got < 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": 'data' holds an object"));
  }
  if (got != n) return CountMismatch(what, "data", got, shape, n);
  Tensor t = Tensor::Uninitialized(dtype, std::move(shape));
  int64_t i = 0;
  RETURN_IF_ERROR(FillFromJson(data, what, i, t));
  return t;
}

Output NumericOutput(std::string name, Tensor t) {
  Output o;
  o.name = std::move(name);
  o.datatype = std::string(DataTypeName(t.dtype()));
  o.shape = t.shape();
  o.tensor = std::move(t);
  return o;
}

absl::StatusOr<Output> Classify(std::string name, const Tensor& t, int64_t k, bool batched) {
  if (k < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("output '", name, "': classification count must be >= 1, got ", k));
  }
  const int64_t rows = batched && t.rank() >= 1 ? t.dim(0) : 1;
  const int64_t classes = rows > 0 ? t.numel() / rows : 0;
  const int64_t top = std::min(k, classes);
  Output o;
  o.name = std::move(name);
  o.datatype = "BYTES";
  o.shape = batched && t.rank() >= 1 ? std::vector<int64_t>{rows, top} : std::vector<int64_t>{top};
  std::vector<int64_t> order(static_cast<size_t>(classes));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t base = r * classes;
    // NaN sorts last; equal scores keep the lower class index first.
    auto before = [&](int64_t a, int64_t b) {
      const double x = t.GetDouble(base + a), y = t.GetDouble(base + b);
      if (std::isnan(x) != std::isnan(y)) return std::isnan(y);
      if (!std::isnan(x) && x != y) return x > y;
      return a < b;
    };
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + top, order.end(), before);
    for (int64_t j = 0; j < top; ++j) {
      o.strings.push_back(
          absl::StrCat(std::to_string(t.GetDouble(base + order[j])), ":", order[j]));
    }
  }
  return o;
}

size_t RawByteSize(const Output& o) {
  if (o.datatype != "BYTES") return o.tensor.nbytes();
  size_t n = 0;
  for (const std::string& s : o.strings) n += 4 + s.size();
  return n;
}

void AppendRawBytes(const Output& o, std::string* out) {
  if (o.datatype != "BYTES") {
    out->append(static_cast<const char*>(o.tensor.raw()), o.tensor.nbytes());
    return;
  }
  for (const std::string& s : o.strings) {
    const uint32_t len = static_cast<uint32_t>(s.size());
    const char prefix[4] = {static_cast<char>(len & 0xFF), static_cast<char>((len >> 8) & 0xFF),
                            static_cast<char>((len >> 16) & 0xFF),
                            static_cast<char>((len >> 24) & 0xFF)};
    out->append(prefix, 4);
    out->append(s);
  }
}

void WriteJsonData(const Output& o, json::Writer& w) {
  w.BeginArray();
  if (o.datatype == "BYTES") {
    for (const std::string& s : o.strings) w.String(s);
    w.EndArray();
    return;
  }
  const Tensor& t = o.tensor;
  const DType d = t.dtype();
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (d == DType::kFloat32) {
      w.Float(t.data<float>()[i]);
    } else if (d == DType::kFloat64) {
      w.Double(t.data<double>()[i]);
    } else if (IsFloatDType(d)) {
      w.Float(static_cast<float>(t.GetDouble(i)));  // FP16/BF16 widen exactly to float
    } else if (d == DType::kBool) {
      w.Bool(t.data<uint8_t>()[i] != 0);
    } else if (IsUnsigned(d)) {
      w.UInt(t.GetUInt(i));
    } else {
      w.Int(t.GetInt(i));
    }
  }
  w.EndArray();
}

}  // namespace kiln::server::kserve

#include "server/serving/tensor_codec.h"

#include <cstring>

#include "server/common/wire_checks.h"

namespace kiln::server {
namespace {

enum class Field { kNone, kFloat, kDouble, kInt64, kInt32, kBool };

// The typed field a dtype may use (kNone: raw_data only).
Field FieldFor(DType t) {
  switch (t) {
    case DType::kFloat32:
      return Field::kFloat;
    case DType::kFloat64:
      return Field::kDouble;
    case DType::kInt64:
      return Field::kInt64;
    case DType::kInt32:
    case DType::kInt16:
    case DType::kInt8:
    case DType::kUInt16:
    case DType::kUInt8:
      return Field::kInt32;
    case DType::kBool:
      return Field::kBool;
    default:
      return Field::kNone;
  }
}

const char* FieldName(Field f) {
  switch (f) {
    case Field::kFloat:
      return "float_data";
    case Field::kDouble:
      return "double_data";
    case Field::kInt64:
      return "int64_data";
    case Field::kInt32:
      return "int32_data";
    case Field::kBool:
      return "bool_data";
    case Field::kNone:
      break;
  }
  return "raw_data";
}

// The typed field the client filled, and its length; kNone if none. Fails if several are.
absl::StatusOr<std::pair<Field, int>> TypedFieldOf(const v1::Tensor& p, const std::string& what) {
  std::pair<Field, int> found{Field::kNone, 0};
  int count = 0;
  auto see = [&](Field f, int n) {
    if (n > 0) {
      found = {f, n};
      ++count;
    }
  };
  see(Field::kFloat, p.float_data_size());
  see(Field::kDouble, p.double_data_size());
  see(Field::kInt64, p.int64_data_size());
  see(Field::kInt32, p.int32_data_size());
  see(Field::kBool, p.bool_data_size());
  if (count > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": more than one typed data field is set"));
  }
  return found;
}

void FillFromTyped(const v1::Tensor& p, Field f, Tensor& t) {
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (f) {
      case Field::kFloat:
        t.mutable_data<float>()[i] = p.float_data(i);
        break;
      case Field::kDouble:
        t.mutable_data<double>()[i] = p.double_data(i);
        break;
      case Field::kInt64:
        t.mutable_data<int64_t>()[i] = p.int64_data(i);
        break;
      case Field::kInt32:
        t.SetInt(i, p.int32_data(i));
        break;
      case Field::kBool:
        t.mutable_data<uint8_t>()[i] = p.bool_data(i) ? 1 : 0;
        break;
      case Field::kNone:
        break;
    }
  }
}

// The buffer is allocated only after every size is checked against the bytes actually sent:
// a shape alone (up to 2^40 elements) must never make the server allocate.
absl::StatusOr<Tensor> Decode(const v1::Tensor& p, const std::string& what, v1::Tensor* take) {
  const DType dtype = static_cast<DType>(p.dtype());
  if (!IsSupportedDType(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": unsupported dtype ", DTypeName(dtype)));
  }
  ASSIGN_OR_RETURN(const int64_t numel, CheckedElementCount(p.shape(), what));
  std::vector<int64_t> shape(p.shape().begin(), p.shape().end());
  const size_t nbytes = static_cast<size_t>(numel) * DTypeSize(dtype);
  ASSIGN_OR_RETURN(auto typed, TypedFieldOf(p, what));
  if (typed.first != Field::kNone && !p.raw_data().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": both raw_data and ", FieldName(typed.first), " are set"));
  }
  if (typed.first != Field::kNone) {
    if (typed.first != FieldFor(dtype)) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": ", FieldName(typed.first),
                                                     " does not match dtype ", DTypeName(dtype),
                                                     " (use ", FieldName(FieldFor(dtype)), ")"));
    }
    if (typed.second != numel) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": ", FieldName(typed.first), " has ",
                                                     typed.second, " elements, shape ",
                                                     ShapeToString(shape), " needs ", numel));
    }
    Tensor t = Tensor::Uninitialized(dtype, shape);  // FillFromTyped writes every element
    FillFromTyped(p, typed.first, t);
    return t;
  }
  if (p.raw_data().size() != nbytes) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": raw_data has ", p.raw_data().size(),
                                                   " bytes, ", DTypeName(dtype),
                                                   ShapeToString(shape), " needs ", nbytes));
  }
  if (take != nullptr && nbytes > 0) {
    // Moving the string keeps its heap buffer: the tensor views the request's own bytes.
    auto owner = std::make_shared<std::string>(std::move(*take->mutable_raw_data()));
    if (reinterpret_cast<uintptr_t>(owner->data()) % DTypeSize(dtype) == 0) {
      return Tensor::View(dtype, std::move(shape), owner, owner->data());
    }
    Tensor t = Tensor::Uninitialized(dtype, shape);  // misaligned for the dtype: copy
    std::memcpy(t.raw_mutable(), owner->data(), nbytes);
    return t;
  }
  Tensor t = Tensor::Uninitialized(dtype, shape);
  if (nbytes > 0) std::memcpy(t.raw_mutable(), p.raw_data().data(), nbytes);
  return t;
}

}  // namespace

absl::StatusOr<Tensor> DecodeTensor(const v1::Tensor& p, const std::string& what) {
  return Decode(p, what, nullptr);
}

absl::StatusOr<Tensor> TakeTensor(v1::Tensor* p, const std::string& what) {
  return Decode(*p, what, p);
}

void EncodeTensor(const Tensor& t, bool typed, v1::Tensor* out) {
  out->set_dtype(static_cast<v1::DataType>(t.dtype()));
  for (int64_t d : t.shape()) out->add_shape(d);
  const Field f = typed ? FieldFor(t.dtype()) : Field::kNone;
  switch (f) {
    case Field::kFloat:
      out->mutable_float_data()->Add(t.data<float>(), t.data<float>() + t.numel());
      return;
    case Field::kDouble:
      out->mutable_double_data()->Add(t.data<double>(), t.data<double>() + t.numel());
      return;
    case Field::kInt64:
      out->mutable_int64_data()->Add(t.data<int64_t>(), t.data<int64_t>() + t.numel());
      return;
    case Field::kInt32:
      for (int64_t i = 0; i < t.numel(); ++i)
        out->add_int32_data(static_cast<int32_t>(t.GetInt(i)));
      return;
    case Field::kBool:
      for (int64_t i = 0; i < t.numel(); ++i) out->add_bool_data(t.data<uint8_t>()[i] != 0);
      return;
    case Field::kNone:
      break;
  }
  out->set_raw_data(t.raw(), t.nbytes());
}

}  // namespace kiln::server

#include "ir/tensor.h"

#include <cstdlib>
#include <cstring>
#include <optional>
#include <type_traits>

#include "base/aligned.h"
#include "base/memory_budget.h"

namespace kiln {
namespace {

// Inside a MemoryScope the buffer is charged to the scope's account before it is allocated
// (a refused charge throws MemoryBudgetError) and given back when the last owner frees it.
std::shared_ptr<void> AllocateAligned(size_t nbytes, bool zero) {
  const size_t size = AlignedSize(nbytes);
  const std::shared_ptr<MemoryAccount>* scope = CurrentMemoryAccount();
  if (scope == nullptr) {
    void* p = std::aligned_alloc(kBufferAlignment, size);
    if (p == nullptr) throw std::bad_alloc();
    if (zero) std::memset(p, 0, size);
    return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  }
  const int64_t charged = static_cast<int64_t>(size);
  if (absl::Status s = (*scope)->Charge(charged); !s.ok()) throw MemoryBudgetError(std::move(s));
  void* p = std::aligned_alloc(kBufferAlignment, size);
  if (p == nullptr) {
    (*scope)->Release(charged);
    throw std::bad_alloc();
  }
  if (zero) std::memset(p, 0, size);
  return std::shared_ptr<void>(p, [account = *scope, charged](void* q) {
    std::free(q);
    account->Release(charged);
  });
}

}  // namespace

int64_t NumElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeToString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

Tensor::Tensor(DType dtype, std::vector<int64_t> shape)
    : dtype_(dtype), shape_(std::move(shape)), numel_(NumElements(shape_)) {
  owner_ = AllocateAligned(nbytes(), /*zero=*/true);
  data_ = owner_.get();
}

Tensor Tensor::Uninitialized(DType dtype, std::vector<int64_t> shape) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.numel_ = NumElements(t.shape_);
  t.owner_ = AllocateAligned(t.nbytes(), /*zero=*/false);
  t.data_ = t.owner_.get();
  return t;
}

Tensor Tensor::View(DType dtype, std::vector<int64_t> shape, std::shared_ptr<void> owner,
                    void* data) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.numel_ = NumElements(t.shape_);
  t.owner_ = std::move(owner);
  t.data_ = data;
  return t;
}

namespace {

// Element i of `base` as R for the integer dtypes (bool and the sub-byte ones, which live one
// per byte, included); nullopt for the floating ones.
template <class R>
std::optional<R> IntegerElement(DType dtype, const void* base, int64_t i) {
  auto at = [&](auto* typed) { return static_cast<R>(typed[i]); };
  switch (dtype) {
    case DType::kInt8:
    case DType::kInt4:
    case DType::kInt2:
      return at(static_cast<const int8_t*>(base));
    case DType::kInt16:
      return at(static_cast<const int16_t*>(base));
    case DType::kInt32:
      return at(static_cast<const int32_t*>(base));
    case DType::kInt64:
      return at(static_cast<const int64_t*>(base));
    case DType::kUInt8:
    case DType::kUInt4:
    case DType::kUInt2:
      return at(static_cast<const uint8_t*>(base));
    case DType::kUInt16:
      return at(static_cast<const uint16_t*>(base));
    case DType::kUInt32:
      return at(static_cast<const uint32_t*>(base));
    case DType::kUInt64:
      return at(static_cast<const uint64_t*>(base));
    case DType::kBool:
      return static_cast<R>(static_cast<const uint8_t*>(base)[i] != 0);
    default:
      return std::nullopt;
  }
}

}  // namespace

double Tensor::GetDouble(int64_t i) const {
  switch (dtype_) {
    case DType::kFloat32:
      return data<float>()[i];
    case DType::kFloat64:
      return data<double>()[i];
    case DType::kFloat16:
      return HalfToFloat(data<uint16_t>()[i]);
    case DType::kBFloat16:
      return BFloat16ToFloat(data<uint16_t>()[i]);
    default:
      break;
  }
  if (std::optional<double> v = IntegerElement<double>(dtype_, data_, i)) return *v;
  if (IsNarrowFloatDType(dtype_)) return NarrowFloatToDouble(dtype_, data<uint8_t>()[i]);
  return 0.0;
}

void Tensor::SetDouble(int64_t i, double v) {
  switch (dtype_) {
    case DType::kFloat32:
      mutable_data<float>()[i] = static_cast<float>(v);
      break;
    case DType::kFloat64:
      mutable_data<double>()[i] = v;
      break;
    case DType::kFloat16:
      mutable_data<uint16_t>()[i] = FloatToHalf(static_cast<float>(v));
      break;
    case DType::kBFloat16:
      mutable_data<uint16_t>()[i] = FloatToBFloat16(static_cast<float>(v));
      break;
    case DType::kBool:
      mutable_data<uint8_t>()[i] = v != 0.0;
      break;
    // Narrow floats take Cast's defaults: saturate, and round up for e8m0.
    case DType::kFloat8E8M0:
      mutable_data<uint8_t>()[i] = DoubleToE8M0(v, true, E8M0Rounding::kUp);
      break;
    case DType::kFloat8E4M3FN:
    case DType::kFloat8E4M3FNUZ:
    case DType::kFloat8E5M2:
    case DType::kFloat8E5M2FNUZ:
    case DType::kFloat4E2M1:
      mutable_data<uint8_t>()[i] = DoubleToFloat8(dtype_, v, true);
      break;
    default:
      SetInt(i, static_cast<int64_t>(v));
      break;
  }
}

int64_t Tensor::GetInt(int64_t i) const {
  if (std::optional<int64_t> v = IntegerElement<int64_t>(dtype_, data_, i)) return *v;
  return static_cast<int64_t>(GetDouble(i));
}

void Tensor::SetInt(int64_t i, int64_t v) {
  auto put = [&](auto* typed) {
    typed[i] = static_cast<std::remove_reference_t<decltype(*typed)>>(v);
  };
  switch (dtype_) {
    case DType::kInt8:
      return put(mutable_data<int8_t>());
    case DType::kInt16:
      return put(mutable_data<int16_t>());
    case DType::kInt32:
      return put(mutable_data<int32_t>());
    case DType::kInt64:
      return put(mutable_data<int64_t>());
    case DType::kUInt8:
      return put(mutable_data<uint8_t>());
    case DType::kUInt16:
      return put(mutable_data<uint16_t>());
    case DType::kUInt32:
      return put(mutable_data<uint32_t>());
    case DType::kUInt64:
      return put(mutable_data<uint64_t>());
    case DType::kBool:
      mutable_data<uint8_t>()[i] = v != 0;
      return;
    // Sub-byte integers live one per byte, already wrapped (and sign-extended) to their width.
    case DType::kInt4:
    case DType::kInt2:
      mutable_data<int8_t>()[i] = static_cast<int8_t>(WrapNarrowInt(dtype_, v));
      return;
    case DType::kUInt4:
    case DType::kUInt2:
      mutable_data<uint8_t>()[i] = static_cast<uint8_t>(WrapNarrowInt(dtype_, v));
      return;
    default:
      SetDouble(i, static_cast<double>(v));
      return;
  }
}

uint64_t Tensor::GetUInt(int64_t i) const {
  if (dtype_ == DType::kUInt64) return data<uint64_t>()[i];
  return static_cast<uint64_t>(GetInt(i));
}

void Tensor::SetUInt(int64_t i, uint64_t v) {
  if (dtype_ == DType::kUInt64) {
    mutable_data<uint64_t>()[i] = v;
  } else {
    SetInt(i, static_cast<int64_t>(v));
  }
}

std::vector<int64_t> Tensor::ToInt64Vector() const {
  std::vector<int64_t> v(numel_);
  for (int64_t i = 0; i < numel_; ++i) v[i] = GetInt(i);
  return v;
}

std::vector<double> Tensor::ToDoubleVector() const {
  std::vector<double> v(numel_);
  for (int64_t i = 0; i < numel_; ++i) v[i] = GetDouble(i);
  return v;
}

Tensor Tensor::Reshaped(std::vector<int64_t> shape) const {
  Tensor t = *this;
  t.shape_ = std::move(shape);
  t.numel_ = NumElements(t.shape_);
  return t;
}

Tensor Tensor::Clone() const {
  Tensor t(dtype_, shape_);
  if (nbytes() > 0) std::memcpy(t.data_, data_, nbytes());
  return t;
}

Tensor Tensor::Scalar(DType dtype, double v) {
  Tensor t(dtype, {});
  t.SetDouble(0, v);
  return t;
}

Tensor Tensor::FromInt64(const std::vector<int64_t>& v, std::vector<int64_t> shape) {
  if (shape.empty() && v.size() != 1) shape = {static_cast<int64_t>(v.size())};
  Tensor t(DType::kInt64, shape);
  if (!v.empty()) std::memcpy(t.data_, v.data(), v.size() * sizeof(int64_t));
  return t;
}

Tensor Tensor::FromFloat(const std::vector<float>& v, std::vector<int64_t> shape) {
  if (shape.empty() && v.size() != 1) shape = {static_cast<int64_t>(v.size())};
  Tensor t(DType::kFloat32, shape);
  if (!v.empty()) std::memcpy(t.data_, v.data(), v.size() * sizeof(float));
  return t;
}

}  // namespace kiln

// A dense tensor: dtype, concrete shape and a shared, 64-byte aligned buffer. Copying a
// Tensor shares the buffer (constants are never duplicated); Clone() makes a deep copy.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ir/dtype.h"

namespace kiln {

class Tensor {
 public:
  Tensor() = default;
  // Allocates a zero-filled buffer. dtype must have a nonzero DTypeSize.
  Tensor(DType dtype, std::vector<int64_t> shape);
  // Allocates without zeroing, for a writer about to fill every byte (request decoding,
  // batch concatenation): on a 600 KB image the memset is a measurable share of the copy.
  static Tensor Uninitialized(DType dtype, std::vector<int64_t> shape);
  // Views `nbytes` bytes of an existing buffer starting at `data` (kept alive by `owner`).
  static Tensor View(DType dtype, std::vector<int64_t> shape, std::shared_ptr<void> owner,
                     void* data);

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  int64_t dim(int64_t i) const { return shape_[i]; }
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * DTypeSize(dtype_); }
  bool defined() const { return dtype_ != DType::kUndefined; }

  const void* raw() const { return data_; }
  void* raw_mutable() { return data_; }
  template <class T>
  const T* data() const {
    return static_cast<const T*>(data_);
  }
  template <class T>
  T* mutable_data() {
    return static_cast<T*>(data_);
  }

  // Element access through double / int64, for any supported dtype. Slow but uniform:
  // the reference kernels use it where clarity beats speed.
  double GetDouble(int64_t i) const;
  void SetDouble(int64_t i, double v);
  int64_t GetInt(int64_t i) const;
  void SetInt(int64_t i, int64_t v);
  uint64_t GetUInt(int64_t i) const;  // exact for uint64 values above INT64_MAX
  void SetUInt(int64_t i, uint64_t v);

  std::vector<int64_t> ToInt64Vector() const;
  std::vector<double> ToDoubleVector() const;
  // Same bytes, new shape (numel must match).
  Tensor Reshaped(std::vector<int64_t> shape) const;
  Tensor Clone() const;
  bool SharesBufferWith(const Tensor& other) const { return owner_ == other.owner_; }
  // The buffer's owner, for caches keyed on a constant's identity: a weak_ptr to it tells
  // whether the bytes a result was derived from are still the same object.
  const std::shared_ptr<void>& owner() const { return owner_; }

  // Factories for small constants.
  static Tensor Scalar(DType dtype, double v);
  static Tensor FromInt64(const std::vector<int64_t>& v, std::vector<int64_t> shape = {});
  static Tensor FromFloat(const std::vector<float>& v, std::vector<int64_t> shape = {});

 private:
  DType dtype_ = DType::kUndefined;
  std::vector<int64_t> shape_;
  int64_t numel_ = 0;
  std::shared_ptr<void> owner_;
  void* data_ = nullptr;
};

int64_t NumElements(const std::vector<int64_t>& shape);
std::string ShapeToString(const std::vector<int64_t>& shape);

}  // namespace kiln

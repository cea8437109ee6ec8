// Shared helpers for reference kernels: errors that name the node, axis handling,
// broadcasting, and dtype dispatch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "ir/graph.h"
#include "ops/kernel.h"

namespace kiln::ref {

// UNIMPLEMENTED naming the operator, node and opset: "Conv 'c1' (opset 11): <what>".
absl::Status Unsupported(const Node& node, const std::string& what);
// INVALID_ARGUMENT naming the node.
absl::Status InvalidInput(const Node& node, const std::string& what);

// Checks input i is present; returns it or an INVALID_ARGUMENT error.
absl::StatusOr<const Tensor*> RequireInput(const Node& node, const KernelInputs& in, size_t i);
// Fails unless the dtype is one of `allowed`.
absl::Status CheckDType(const Node& node, DType t, std::initializer_list<DType> allowed);
// Fails with UNIMPLEMENTED for dtypes Kiln does not support (string, float8, int4...).
absl::Status CheckSupportedDType(const Node& node, DType t);

// Maps a possibly negative axis into [0, rank); error if out of range.
absl::StatusOr<int64_t> NormalizeAxis(const Node& node, int64_t axis, int64_t rank);

// Row-major strides of a shape.
std::vector<int64_t> Strides(const std::vector<int64_t>& shape);
// Numpy broadcasting of several shapes; INVALID_ARGUMENT when incompatible.
absl::StatusOr<std::vector<int64_t>> BroadcastShapes(
    const Node& node, const std::vector<std::vector<int64_t>>& shapes);

// Maps a flat index of the broadcast output to the flat index of one input.
class BroadcastIndexer {
 public:
  BroadcastIndexer(const std::vector<int64_t>& in_shape, const std::vector<int64_t>& out_shape);
  int64_t operator()(int64_t out_index) const;

 private:
  std::vector<int64_t> out_shape_;
  std::vector<int64_t> in_strides_;  // 0 on broadcast dims, aligned to out rank
  bool identity_ = false;
};

// Calls f(T{}) with T the C++ storage type of dtype (Float16/BFloat16 for halves, bool for
// BOOL). Returns UNIMPLEMENTED for anything else.
template <class F>
absl::Status DispatchStorage(const Node& node, DType t, F&& f) {
  switch (t) {
    case DType::kFloat32:
      f(float{});
      return absl::OkStatus();
    case DType::kFloat64:
      f(double{});
      return absl::OkStatus();
    case DType::kFloat16:
      f(Float16{});
      return absl::OkStatus();
    case DType::kBFloat16:
      f(BFloat16{});
      return absl::OkStatus();
    case DType::kInt8:
      f(int8_t{});
      return absl::OkStatus();
    case DType::kInt16:
      f(int16_t{});
      return absl::OkStatus();
    case DType::kInt32:
      f(int32_t{});
      return absl::OkStatus();
    case DType::kInt64:
      f(int64_t{});
      return absl::OkStatus();
    case DType::kUInt8:
      f(uint8_t{});
      return absl::OkStatus();
    case DType::kUInt16:
      f(uint16_t{});
      return absl::OkStatus();
    case DType::kUInt32:
      f(uint32_t{});
      return absl::OkStatus();
    case DType::kUInt64:
      f(uint64_t{});
      return absl::OkStatus();
    case DType::kBool:
      f(bool{});
      return absl::OkStatus();
    default:
      return CheckSupportedDType(node, t);
  }
}

// Copies element `src_i` of src to element `dst_i` of dst (same dtype), any element size.
void CopyElement(const Tensor& src, int64_t src_i, Tensor& dst, int64_t dst_i);

}  // namespace kiln::ref

#include "ops/kernel_util.h"

#include <algorithm>
#include <cstring>

namespace kiln::ref {

absl::Status Unsupported(const Node& node, const std::string& what) {
  return absl::UnimplementedError(node.Describe() + ": " + what);
}

absl::Status InvalidInput(const Node& node, const std::string& what) {
  return absl::InvalidArgumentError(node.Describe() + ": " + what);
}

absl::StatusOr<const Tensor*> RequireInput(const Node& node, const KernelInputs& in, size_t i) {
  if (i >= in.size() || in[i] == nullptr) {
    return InvalidInput(node, "missing required input " + std::to_string(i));
  }
  return in[i];
}

absl::Status CheckSupportedDType(const Node& node, DType t) {
  // The narrow types (float8, int4, ...) are supported only by Cast/CastLike, which check
  // them separately; every kernel that computes on elements must keep turning them away.
  if (IsNarrowDType(t)) {
    return Unsupported(node, "dtype " + DTypeName(t) + " is only supported by Cast/CastLike");
  }
  if (IsSupportedDType(t)) return absl::OkStatus();
  return Unsupported(node, "dtype " + DTypeName(t) + " is not supported");
}

absl::Status CheckDType(const Node& node, DType t, std::initializer_list<DType> allowed) {
  RETURN_IF_ERROR(CheckSupportedDType(node, t));
  if (std::find(allowed.begin(), allowed.end(), t) != allowed.end()) return absl::OkStatus();
  return Unsupported(node, "dtype " + DTypeName(t) + " is not supported by this operator");
}

absl::StatusOr<int64_t> NormalizeAxis(const Node& node, int64_t axis, int64_t rank) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= std::max<int64_t>(rank, 1)) {
    return InvalidInput(
        node, "axis " + std::to_string(axis) + " out of range for rank " + std::to_string(rank));
  }
  return a;
}

std::vector<int64_t> Strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i) {
    s[i] = s[i + 1] * shape[i + 1];
  }
  return s;
}

absl::StatusOr<std::vector<int64_t>> BroadcastShapes(
    const Node& node, const std::vector<std::vector<int64_t>>& shapes) {
  size_t rank = 0;
  for (const auto& s : shapes) rank = std::max(rank, s.size());
  std::vector<int64_t> out(rank, 1);
  for (const auto& s : shapes) {
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t& o = out[rank - s.size() + i];
      int64_t d = s[i];
      if (o == d || d == 1) continue;
      if (o == 1) {
        o = d;
        continue;
      }
      return InvalidInput(node, "shapes are not broadcast-compatible: " + ShapeToString(shapes[0]) +
                                    " vs " + ShapeToString(s));
    }
  }
  return out;
}

BroadcastIndexer::BroadcastIndexer(const std::vector<int64_t>& in_shape,
                                   const std::vector<int64_t>& out_shape)
    : out_shape_(out_shape), in_strides_(out_shape.size(), 0) {
  identity_ = in_shape == out_shape;
  std::vector<int64_t> s = Strides(in_shape);
  size_t off = out_shape.size() - in_shape.size();
  for (size_t i = 0; i < in_shape.size(); ++i) {
    in_strides_[off + i] = in_shape[i] == 1 ? 0 : s[i];
  }
}

int64_t BroadcastIndexer::operator()(int64_t out_index) const {
  if (identity_) return out_index;
  int64_t in = 0;
  for (int64_t d = static_cast<int64_t>(out_shape_.size()) - 1; d >= 0; --d) {
    int64_t coord = out_index % out_shape_[d];
    out_index /= out_shape_[d];
    in += coord * in_strides_[d];
  }
  return in;
}

void CopyElement(const Tensor& src, int64_t src_i, Tensor& dst, int64_t dst_i) {
  size_t es = DTypeSize(src.dtype());
  std::memcpy(static_cast<char*>(dst.raw_mutable()) + dst_i * es,
              static_cast<const char*>(src.raw()) + src_i * es, es);
}

}  // namespace kiln::ref

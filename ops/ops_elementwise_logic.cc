// Comparison, logical and selection reference kernels: Equal Greater GreaterOrEqual Less
// LessOrEqual (-> bool), And Or Xor (bool), and Where. All broadcast like numpy.
#include "ops/elementwise_util.h"

namespace kiln::ref::ew {
namespace {

// a, b of one dtype in K -> bool. Floats compare as doubles (exact, NaN compares false).
template <unsigned K, class Cmp>
absl::StatusOr<Tensor> Compare(const Node& node, const Tensor& a, const Tensor& b, Cmp cmp) {
  absl::StatusOr<Tensor> out;
  RETURN_IF_ERROR(Dispatch<K>(node, a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    out = BinaryLoop<T, T, bool>(node, a, b, DType::kBool, cmp);
  }));
  return out;
}

absl::StatusOr<std::vector<Tensor>> Where(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* c, RequireInput(node, in, 0));
  ASSIGN_OR_RETURN(const Tensor* x, RequireInput(node, in, 1));
  ASSIGN_OR_RETURN(const Tensor* y, RequireInput(node, in, 2));
  RETURN_IF_ERROR(CheckSupportedDType(node, c->dtype()));
  if (c->dtype() != DType::kBool) {
    return InvalidInput(node, "condition must be BOOL, got " + DTypeName(c->dtype()));
  }
  RETURN_IF_ERROR(CheckSupportedDType(node, x->dtype()));
  if (x->dtype() != y->dtype()) {
    return InvalidInput(node, "X and Y must share one dtype, got " + DTypeName(x->dtype()) +
                                  " and " + DTypeName(y->dtype()));
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> shape,
                   BroadcastShapes(node, {c->shape(), x->shape(), y->shape()}));
  Tensor out(x->dtype(), shape);
  BroadcastIndexer ic(c->shape(), shape);
  BroadcastIndexer ix(x->shape(), shape);
  BroadcastIndexer iy(y->shape(), shape);
  const bool* pc = c->data<bool>();
  // Selection copies bytes, so every dtype is exact and handled alike.
  for (int64_t i = 0; i < out.numel(); ++i) {
    if (pc[ic(i)]) {
      CopyElement(*x, ix(i), out, i);
    } else {
      CopyElement(*y, iy(i), out, i);
    }
  }
  return std::vector<Tensor>{std::move(out)};
}

}  // namespace

void RegisterLogicKernels(KernelRegistry& r) {
  RegisterBinary(r, "Equal", [](const Node& node, const Tensor& a, const Tensor& b) {
    return Compare<kAll>(node, a, b, [](auto x, auto y) { return x == y; });
  });
  RegisterBinary(r, "Greater", [](const Node& node, const Tensor& a, const Tensor& b) {
    return Compare<kNumeric>(node, a, b, [](auto x, auto y) { return x > y; });
  });
  RegisterBinary(r, "GreaterOrEqual", [](const Node& node, const Tensor& a, const Tensor& b) {
    return Compare<kNumeric>(node, a, b, [](auto x, auto y) { return x >= y; });
  });
  RegisterBinary(r, "Less", [](const Node& node, const Tensor& a, const Tensor& b) {
    return Compare<kNumeric>(node, a, b, [](auto x, auto y) { return x < y; });
  });
  RegisterBinary(r, "LessOrEqual", [](const Node& node, const Tensor& a, const Tensor& b) {
    return Compare<kNumeric>(node, a, b, [](auto x, auto y) { return x <= y; });
  });
  RegisterBinary(r, "And", [](const Node& node, const Tensor& a, const Tensor& b) {
    return Compare<kBool>(node, a, b, [](bool x, bool y) { return x && y; });
  });
  RegisterBinary(r, "Or", [](const Node& node, const Tensor& a, const Tensor& b) {
    return Compare<kBool>(node, a, b, [](bool x, bool y) { return x || y; });
  });
  RegisterBinary(r, "Xor", [](const Node& node, const Tensor& a, const Tensor& b) {
    return Compare<kBool>(node, a, b, [](bool x, bool y) { return x != y; });
  });
  r.Register(kOnnxDomain, "Where", Where);
}

}  // namespace kiln::ref::ew

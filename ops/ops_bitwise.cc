// BitwiseAnd, BitwiseOr, BitwiseXor (numpy broadcasting), BitwiseNot (integer types), and
// BitCast (opset 26): the same bits read as another type of the same width, shape kept. The
// 4- and 2-bit types are held one per byte (sign-extended for int4/int2), so their bit
// pattern is the low bits of that byte; bool holds 0 or 1, so a byte cast to bool is its
// truth value.
#include <cstring>

#include "ops/elementwise_util.h"

namespace kiln::ref::ew {
namespace {

template <class Fn>
absl::StatusOr<Tensor> Bitwise(const Node& node, const Tensor& a, const Tensor& b, Fn fn) {
  absl::StatusOr<Tensor> out;
  RETURN_IF_ERROR(Dispatch<kInts>(node, a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    out = BinaryLoop<T, T, T>(node, a, b, a.dtype(),
                              [&fn](T x, T y) { return static_cast<T>(fn(x, y)); });
  }));
  return out;
}

// Bits per element, counting the packed sizes of the narrow types; 0 for string.
int BitWidth(DType t) {
  const int sub = SubByteBits(t);
  return sub != 0 ? sub : static_cast<int>(DTypeSize(t) * 8);
}

// The stored byte of a narrow element with `bits` significant bits, as `to` stores it.
uint8_t NarrowBits(uint8_t byte, int bits, DType to) {
  const uint8_t mask = static_cast<uint8_t>((1u << bits) - 1);
  if (to == DType::kInt4 || to == DType::kInt2) {
    return static_cast<uint8_t>(WrapNarrowInt(to, byte & mask));
  }
  return byte & mask;
}

absl::StatusOr<std::vector<Tensor>> BitCast(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* x, RequireInput(node, in, 0));
  const int64_t to_attr = node.GetInt("to", 0);
  if (to_attr <= 0 || to_attr > 1000) return InvalidInput(node, "missing or invalid 'to'");
  const DType to = static_cast<DType>(to_attr);
  for (DType t : {x->dtype(), to}) {
    if (!IsSupportedDType(t))
      return Unsupported(node, "dtype " + DTypeName(t) + " is not supported");
  }
  const int bits = BitWidth(x->dtype());
  if (bits != BitWidth(to)) {
    return InvalidInput(
        node, DTypeName(x->dtype()) + " and " + DTypeName(to) + " have different bit widths");
  }
  Tensor y(to, x->shape());
  if (bits < 8) {
    for (int64_t i = 0; i < x->numel(); ++i) {
      y.mutable_data<uint8_t>()[i] = NarrowBits(x->data<uint8_t>()[i], bits, to);
    }
  } else if (to == DType::kBool) {
    for (int64_t i = 0; i < x->numel(); ++i) y.mutable_data<bool>()[i] = x->data<uint8_t>()[i];
  } else {
    std::memcpy(y.raw_mutable(), x->raw(), x->nbytes());
  }
  return std::vector<Tensor>{std::move(y)};
}

}  // namespace

void RegisterBitwiseKernels(KernelRegistry& r) {
  RegisterBinary(r, "BitwiseAnd", [](const Node& node, const Tensor& a, const Tensor& b) {
    return Bitwise(node, a, b, [](auto x, auto y) { return x & y; });
  });
  RegisterBinary(r, "BitwiseOr", [](const Node& node, const Tensor& a, const Tensor& b) {
    return Bitwise(node, a, b, [](auto x, auto y) { return x | y; });
  });
  RegisterBinary(r, "BitwiseXor", [](const Node& node, const Tensor& a, const Tensor& b) {
    return Bitwise(node, a, b, [](auto x, auto y) { return x ^ y; });
  });
  RegisterUnary(r, "BitwiseNot", [](const Node& node, const Tensor& x) {
    return MapSame<kInts>(node, x, [](auto v) { return static_cast<decltype(v)>(~v); });
  });
  r.Register(kOnnxDomain, "BitCast", BitCast);
}

}  // namespace kiln::ref::ew

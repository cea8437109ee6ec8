// Shape rules of the quantization family. QuantizeLinear and DequantizeLinear keep x's shape
// (the quantized type is the zero point's, else output_dtype, else uint8; the dequantized one
// output_dtype, else the scale's); DynamicQuantizeLinear adds a scalar scale and zero point;
// MatMulInteger/ConvInteger give int32 products, QLinearMatMul/QLinearConv products in the
// output zero point's type (else the input's), shaped as MatMul and Conv shape them.
#include "compiler/shape/nn_rules.h"
#include "compiler/shape/shape_util.h"

namespace kiln::shape {
namespace {

// A dtype attribute (0 = absent) checked to be a known element type.
absl::StatusOr<DType> DTypeAttr(const InferContext& ctx, const char* name) {
  const int64_t v = ctx.node().GetInt(name, 0);
  if (v == 0) return DType::kUndefined;
  if (v < 0 || v > 1000 || !IsValidOnnxDType(static_cast<int32_t>(v))) {
    return ctx.Invalid(std::string(name) + " " + std::to_string(v) + " is not a dtype");
  }
  return static_cast<DType>(v);
}

absl::Status QuantizeRule(InferContext& ctx) {
  ASSIGN_OR_RETURN(DType attr, DTypeAttr(ctx, "output_dtype"));
  DType t = ctx.has_input(2) ? ctx.input_dtype(2) : attr;
  if (t == DType::kUndefined) t = DType::kUInt8;
  if (ctx.has_input(2) && attr != DType::kUndefined && attr != t) {
    return ctx.Invalid("output_dtype disagrees with the zero point's dtype");
  }
  ctx.set_output(0, t, ctx.input_shape(0));
  return absl::OkStatus();
}

absl::Status DequantizeRule(InferContext& ctx) {
  ASSIGN_OR_RETURN(DType attr, DTypeAttr(ctx, "output_dtype"));
  ctx.set_output(0, attr != DType::kUndefined ? attr : ctx.input_dtype(1), ctx.input_shape(0));
  return absl::OkStatus();
}

absl::Status DynamicQuantizeRule(InferContext& ctx) {
  ctx.set_output(0, DType::kUInt8, ctx.input_shape(0));
  ctx.set_output(1, ctx.input_dtype(0), Shape{});
  ctx.set_output(2, DType::kUInt8, Shape{});
  return absl::OkStatus();
}

// A product rule: MatMul- or Conv-shaped, typed `dtype` (or the zero point's at input zp_in).
absl::Status ProductRule(InferContext& ctx, size_t a, size_t b, bool conv, DType dtype, int zp_in) {
  if (zp_in >= 0) {
    dtype = ctx.has_input(static_cast<size_t>(zp_in)) ? ctx.input_dtype(zp_in) : ctx.input_dtype(0);
  }
  std::optional<Shape> out;
  if (conv) {
    ASSIGN_OR_RETURN(out, ConvOutputShape(ctx, a, b, false));
  } else {
    ASSIGN_OR_RETURN(out, MatMulOutputShape(ctx, a, b));
  }
  ctx.set_output(0, dtype, out);
  return absl::OkStatus();
}

}  // namespace

void RegisterQuantizeRules(RuleRegistry& r) {
  r.Register("", "QuantizeLinear", QuantizeRule);
  r.Register("", "DequantizeLinear", DequantizeRule);
  r.Register("", "DynamicQuantizeLinear", DynamicQuantizeRule);
  r.Register("", "MatMulInteger",
             [](InferContext& c) { return ProductRule(c, 0, 1, false, DType::kInt32, -1); });
  r.Register("", "ConvInteger",
             [](InferContext& c) { return ProductRule(c, 0, 1, true, DType::kInt32, -1); });
  r.Register("", "QLinearMatMul",
             [](InferContext& c) { return ProductRule(c, 0, 3, false, DType::kUndefined, 7); });
  r.Register("", "QLinearConv",
             [](InferContext& c) { return ProductRule(c, 0, 3, true, DType::kUndefined, 7); });
}

}  // namespace kiln::shape

// Shape and type rules for the element-wise operators: unary ops keep their input's dtype
// and shape, binary and variadic ops broadcast (numpy rules, symbolic dims), comparisons and
// predicates produce BOOL, Pow keeps its base's dtype, Where takes X's dtype, PRelu and Clip
// keep X's shape, BitCast takes the dtype of its `to`.
#include <string>
#include <vector>

#include "compiler/shape/shape_util.h"

namespace kiln::shape {
namespace {

const char* const kUnaryOps[] = {
    "Abs",       "Acos",      "Acosh",          "Asin",  "Asinh", "Atan",   "Atanh",
    "Ceil",      "Cos",       "Cosh",           "Erf",   "Exp",   "Floor",  "Log",
    "Neg",       "Not",       "Reciprocal",     "Round", "Sign",  "Sin",    "Sinh",
    "Sqrt",      "Tan",       "Tanh",           "Celu",  "Elu",   "Gelu",   "HardSigmoid",
    "HardSwish", "LeakyRelu", "Mish",           "Relu",  "Selu",  "Shrink", "Sigmoid",
    "Softplus",  "Softsign",  "ThresholdedRelu", "BitwiseNot", "Swish"};

// Same-dtype broadcasting ops.
const char* const kBinaryOps[] = {"Add", "Sub", "Mul", "Div",        "Mod",       "BitShift",
                                  "And", "Or",  "Xor", "BitwiseAnd", "BitwiseOr", "BitwiseXor"};
const char* const kVariadicOps[] = {"Max", "Min", "Sum", "Mean"};

const char* const kCompareOps[] = {"Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual"};

absl::Status RequireInput(const InferContext& ctx, size_t i) {
  if (ctx.has_input(i)) return absl::OkStatus();
  return ctx.Invalid("missing required input " + std::to_string(i));
}

// The dtype shared by the present inputs in [first, last); INVALID_ARGUMENT when two known
// dtypes differ. kUndefined when none is known yet.
absl::StatusOr<DType> CommonDType(const InferContext& ctx, size_t first, size_t last) {
  DType common = DType::kUndefined;
  for (size_t i = first; i < last && i < ctx.num_inputs(); ++i) {
    DType t = ctx.input_dtype(i);
    if (t == DType::kUndefined) continue;
    if (common != DType::kUndefined && t != common) {
      return ctx.Invalid("inputs must share one dtype, got " + DTypeName(common) + " and " +
                         DTypeName(t));
    }
    common = t;
  }
  return common;
}

absl::Status Unary(InferContext& ctx) {
  RETURN_IF_ERROR(RequireInput(ctx, 0));
  ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(0));
  return absl::OkStatus();
}

absl::Status Predicate(InferContext& ctx) {  // IsInf, IsNaN
  RETURN_IF_ERROR(RequireInput(ctx, 0));
  ctx.set_output(0, DType::kBool, ctx.input_shape(0));
  return absl::OkStatus();
}

// Broadcast of all present inputs, which share one dtype; the output is `out` or that dtype.
absl::Status Broadcast(InferContext& ctx, std::optional<DType> out) {
  RETURN_IF_ERROR(RequireInput(ctx, 0));
  ASSIGN_OR_RETURN(DType common, CommonDType(ctx, 0, ctx.num_inputs()));
  ASSIGN_OR_RETURN(std::optional<Shape> shape, BroadcastInputs(ctx));
  ctx.set_output(0, out.value_or(common), std::move(shape));
  return absl::OkStatus();
}

absl::Status BinaryArity(const InferContext& ctx) {
  RETURN_IF_ERROR(RequireInput(ctx, 0));
  return RequireInput(ctx, 1);
}

// Pow: base and exponent dtypes may differ; the output takes the base's.
absl::Status Pow(InferContext& ctx) {
  RETURN_IF_ERROR(BinaryArity(ctx));
  ASSIGN_OR_RETURN(std::optional<Shape> shape, BroadcastInputs(ctx));
  ctx.set_output(0, ctx.input_dtype(0), std::move(shape));
  return absl::OkStatus();
}

absl::Status Where(InferContext& ctx) {
  for (size_t i = 0; i < 3; ++i) RETURN_IF_ERROR(RequireInput(ctx, i));
  DType cond = ctx.input_dtype(0);
  if (cond != DType::kUndefined && cond != DType::kBool) {
    return ctx.Invalid("condition must be BOOL, got " + DTypeName(cond));
  }
  ASSIGN_OR_RETURN(DType common, CommonDType(ctx, 1, 3));
  ASSIGN_OR_RETURN(std::optional<Shape> shape, BroadcastInputs(ctx));
  ctx.set_output(0, common, std::move(shape));
  return absl::OkStatus();
}

// PRelu: the slope broadcasts into X (unidirectionally), so the output is X's shape.
absl::Status PRelu(InferContext& ctx) {
  RETURN_IF_ERROR(BinaryArity(ctx));
  RETURN_IF_ERROR(RequireInput(ctx, 0));
  ASSIGN_OR_RETURN(DType common, CommonDType(ctx, 0, ctx.num_inputs()));
  std::optional<Shape> x = ctx.input_shape(0);
  ASSIGN_OR_RETURN(std::optional<Shape> all, BroadcastInputs(ctx));
  bool fits = !x || !all || all->size() == x->size();
  for (size_t i = 0; fits && x && all && i < x->size(); ++i) {
    const Dim &a = (*all)[i], &d = (*x)[i];
    fits = !a.known() || !d.known() || a.value == d.value;
  }
  if (!fits) {
    return ctx.Invalid("inputs broadcast to " + ShapeToString(*all) + ", not to X " +
                       ShapeToString(*x));
  }
  ctx.set_output(0, common, x);
  return absl::OkStatus();
}

// Clip: min and max are optional scalars of X's dtype; the output is X's dtype and shape.
absl::Status Clip(InferContext& ctx) {
  RETURN_IF_ERROR(RequireInput(ctx, 0));
  ASSIGN_OR_RETURN(DType common, CommonDType(ctx, 0, ctx.num_inputs()));
  ctx.set_output(0, common, ctx.input_shape(0));
  return absl::OkStatus();
}

}  // namespace

void RegisterElementwiseRules(RuleRegistry& r) {
  for (const char* op : kUnaryOps) r.Register(kOnnxDomain, op, Unary);
  r.Register(kOnnxDomain, "IsInf", Predicate);
  r.Register(kOnnxDomain, "IsNaN", Predicate);
  for (const char* op : kBinaryOps) {
    r.Register(kOnnxDomain, op, [](InferContext& ctx) {
      RETURN_IF_ERROR(BinaryArity(ctx));
      return Broadcast(ctx, std::nullopt);
    });
  }
  for (const char* op : kVariadicOps) {
    r.Register(kOnnxDomain, op, [](InferContext& ctx) { return Broadcast(ctx, std::nullopt); });
  }
  for (const char* op : kCompareOps) {
    r.Register(kOnnxDomain, op, [](InferContext& ctx) {
      RETURN_IF_ERROR(BinaryArity(ctx));
      return Broadcast(ctx, DType::kBool);
    });
  }
  r.Register(kOnnxDomain, "Pow", Pow);
  r.Register(kOnnxDomain, "Where", Where);
  r.Register(kOnnxDomain, "PRelu", PRelu);
  r.Register(kOnnxDomain, "Clip", Clip);
  // SwiGLU: A and B of one shape (no broadcasting), which Y keeps.
  r.Register(kOnnxDomain, "SwiGLU", [](InferContext& ctx) {
    RETURN_IF_ERROR(BinaryArity(ctx));
    std::optional<Shape> a = ctx.input_shape(0), b = ctx.input_shape(1);
    if (a && b && a->size() != b->size()) return ctx.Invalid("A and B must have one shape");
    ctx.set_output(0, ctx.input_dtype(0), a ? a : b);
    return absl::OkStatus();
  });
  // BitCast: X's shape, the dtype of `to` (same width; the kernel checks).
  r.Register(kOnnxDomain, "BitCast", [](InferContext& ctx) {
    const int64_t to = ctx.node().GetInt("to", 0);
    if (to <= 0 || to > 1000) return ctx.Invalid("missing or invalid 'to'");
    ctx.set_output(0, static_cast<DType>(to), ctx.input_shape(0));
    return absl::OkStatus();
  });
}

}  // namespace kiln::shape

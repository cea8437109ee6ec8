#include "compiler/codegen/op_expressions.h"

#include <functional>
#include <limits>
#include <set>

#include "compiler/codegen/cuda_kernel.h"

namespace kiln::codegen {
namespace {

using Args = std::vector<std::string>;

// Reads attributes with defaults, as the reference does.
class Attrs {
 public:
  explicit Attrs(const std::map<std::string, Attribute>& a) : a_(a) {}
  float F(const char* name, float dflt) const {
    auto it = a_.find(name);
    if (it == a_.end()) return dflt;
    return it->second.kind == Attribute::Kind::kInt ? static_cast<float>(it->second.i) : it->second.f;
  }
  int64_t I(const char* name, int64_t dflt) const {
    auto it = a_.find(name);
    return it == a_.end() ? dflt : it->second.i;
  }
  std::string S(const char* name, const char* dflt) const {
    auto it = a_.find(name);
    return it == a_.end() ? dflt : it->second.s;
  }

 private:
  const std::map<std::string, Attribute>& a_;
};

std::string L(float v) { return FloatLiteral(v); }

using FloatFn = std::function<std::string(const Args&, const Attrs&)>;

// Unary float32 operators (one operand: a[0]).
const std::map<std::string, FloatFn>& UnaryFloat() {
  static const auto* m = new std::map<std::string, FloatFn>{
      {"Neg", [](const Args& a, const Attrs&) { return "(-" + a[0] + ")"; }},
      {"Abs", [](const Args& a, const Attrs&) { return "fabsf(" + a[0] + ")"; }},
      {"Exp", [](const Args& a, const Attrs&) { return "expf(" + a[0] + ")"; }},
      {"Log", [](const Args& a, const Attrs&) { return "logf(" + a[0] + ")"; }},
      {"Sqrt", [](const Args& a, const Attrs&) { return "sqrtf(" + a[0] + ")"; }},
      {"Reciprocal", [](const Args& a, const Attrs&) { return "(1.f / " + a[0] + ")"; }},
      {"Relu", [](const Args& a, const Attrs&) { return "(" + a[0] + " < 0.f ? 0.f : " + a[0] + ")"; }},
      {"Sigmoid", [](const Args& a, const Attrs&) { return "kiln_sigmoid(" + a[0] + ")"; }},
      {"SiLU", [](const Args& a, const Attrs&) { return "(" + a[0] + " * kiln_sigmoid(" + a[0] + "))"; }},
      {"Tanh", [](const Args& a, const Attrs&) { return "tanhf(" + a[0] + ")"; }},
      {"Erf", [](const Args& a, const Attrs&) { return "erff(" + a[0] + ")"; }},
      {"GeluTanh", [](const Args& a, const Attrs&) { return "kiln_gelu_tanh(" + a[0] + ")"; }},
      {"HardSwish",
       [](const Args& a, const Attrs&) {
         return "(" + a[0] + " * kiln_clamp01(" + a[0] + " / 6.f + 0.5f))";
       }},
      {"Softplus", [](const Args& a, const Attrs&) { return "kiln_softplus(" + a[0] + ")"; }},
      {"Softsign", [](const Args& a, const Attrs&) { return "(" + a[0] + " / (1.f + fabsf(" + a[0] + ")))"; }},
      {"Mish", [](const Args& a, const Attrs&) { return "(" + a[0] + " * tanhf(kiln_softplus(" + a[0] + ")))"; }},
      {"Ceil", [](const Args& a, const Attrs&) { return "ceilf(" + a[0] + ")"; }},
      {"Floor", [](const Args& a, const Attrs&) { return "floorf(" + a[0] + ")"; }},
      {"Round", [](const Args& a, const Attrs&) { return "rintf(" + a[0] + ")"; }},
      {"Sign", [](const Args& a, const Attrs&) { return "kiln_sign(" + a[0] + ")"; }},
      {"Sin", [](const Args& a, const Attrs&) { return "sinf(" + a[0] + ")"; }},
      {"Cos", [](const Args& a, const Attrs&) { return "cosf(" + a[0] + ")"; }},
      {"Tan", [](const Args& a, const Attrs&) { return "tanf(" + a[0] + ")"; }},
      {"Asin", [](const Args& a, const Attrs&) { return "asinf(" + a[0] + ")"; }},
      {"Acos", [](const Args& a, const Attrs&) { return "acosf(" + a[0] + ")"; }},
      {"Atan", [](const Args& a, const Attrs&) { return "atanf(" + a[0] + ")"; }},
      {"Sinh", [](const Args& a, const Attrs&) { return "sinhf(" + a[0] + ")"; }},
      {"Cosh", [](const Args& a, const Attrs&) { return "coshf(" + a[0] + ")"; }},
      {"Asinh", [](const Args& a, const Attrs&) { return "asinhf(" + a[0] + ")"; }},
      {"Acosh", [](const Args& a, const Attrs&) { return "acoshf(" + a[0] + ")"; }},
      {"Atanh", [](const Args& a, const Attrs&) { return "atanhf(" + a[0] + ")"; }},
  };
  return *m;
}

// Unary float32 operators with attributes.
const std::map<std::string, FloatFn>& ParamFloat() {
  static const auto* m = new std::map<std::string, FloatFn>{
      {"LeakyRelu",
       [](const Args& a, const Attrs& t) {
         return "(" + a[0] + " < 0.f ? " + L(t.F("alpha", 0.01f)) + " * " + a[0] + " : " + a[0] + ")";
       }},
      {"HardSigmoid",
       [](const Args& a, const Attrs& t) {
         return "kiln_clamp01(" + L(t.F("alpha", 0.2f)) + " * " + a[0] + " + " + L(t.F("beta", 0.5f)) + ")";
       }},
      {"Elu",
       [](const Args& a, const Attrs& t) {
         return "(" + a[0] + " < 0.f ? " + L(t.F("alpha", 1.f)) + " * expm1f(" + a[0] + ") : " + a[0] + ")";
       }},
      {"Celu",
       [](const Args& a, const Attrs& t) {
         const std::string al = L(t.F("alpha", 1.f));
         const std::string e = al + " * expm1f(" + a[0] + " / " + al + ")";
         return "((" + a[0] + " < 0.f ? 0.f : " + a[0] + ") + (" + e + " > 0.f ? 0.f : " + e + "))";
       }},
      {"Selu",
       [](const Args& a, const Attrs& t) {
         const std::string al = L(t.F("alpha", 1.67326319217681884765625f));
         const std::string ga = L(t.F("gamma", 1.05070102214813232421875f));
         return "(" + a[0] + " > 0.f ? " + ga + " * " + a[0] + " : " + ga + " * " + al + " * expm1f(" + a[0] + "))";
       }},
      {"ThresholdedRelu",
       [](const Args& a, const Attrs& t) {
         return "(" + a[0] + " > " + L(t.F("alpha", 1.f)) + " ? " + a[0] + " : 0.f)";
       }},
      {"Shrink",
       [](const Args& a, const Attrs& t) {
         const std::string l = L(t.F("lambd", 0.5f)), b = L(t.F("bias", 0.f));
         return "(" + a[0] + " < -" + l + " ? " + a[0] + " + " + b + " : (" + a[0] + " > " + l +
                " ? " + a[0] + " - " + b + " : 0.f))";
       }},
  };
  return *m;
}

// Binary float32 operators.
const std::map<std::string, FloatFn>& BinaryFloat() {
  static const auto* m = new std::map<std::string, FloatFn>{
      {"Div", [](const Args& a, const Attrs&) { return "(" + a[0] + " / " + a[1] + ")"; }},
      {"Pow", [](const Args& a, const Attrs&) { return "powf(" + a[0] + ", " + a[1] + ")"; }},
      {"PRelu",
       [](const Args& a, const Attrs&) {
         return "(" + a[0] + " < 0.f ? " + a[1] + " * " + a[0] + " : " + a[0] + ")";
       }},
  };
  return *m;
}

bool IsCTyped(DType t) { return !CType(t).empty(); }

// Variadic or binary ops that work on every C type (ints wrap as the hardware does).
absl::StatusOr<Operand> Arithmetic(const std::string& op, const std::vector<Operand>& args) {
  const DType t = args[0].dtype;
  const bool f = t == DType::kFloat32;
  if (t == DType::kBool) return absl::UnimplementedError(op + " on bool");
  std::string e = args[0].expr;
  for (size_t k = 1; k < args.size(); ++k) {
    const std::string& b = args[k].expr;
    if (op == "Add" || op == "Sum" || op == "Mean") e = "(" + e + " + " + b + ")";
    if (op == "Sub") e = "(" + e + " - " + b + ")";
    if (op == "Mul") e = "(" + e + " * " + b + ")";
    // numpy's maximum/minimum propagate NaN; integers compare plainly.
    const std::string suffix = f ? "" : (t == DType::kFloat64 ? "d" : "");
    const std::string fn = (f || t == DType::kFloat64) ? "kiln_" : "kiln_i";
    if (op == "Max") e = fn + "max" + suffix + "(" + e + ", " + b + ")";
    if (op == "Min") e = fn + "min" + suffix + "(" + e + ", " + b + ")";
  }
  if (op == "Mean") {
    if (!f) return absl::UnimplementedError("Mean on " + DTypeName(t));
    e = "(" + e + " / " + std::to_string(args.size()) + ".f)";
  }
  return Operand{e, t};
}

absl::StatusOr<Operand> Compare(const std::string& op, const std::vector<Operand>& a) {
  static const std::map<std::string, std::string> kOps = {
      {"Equal", "=="}, {"Less", "<"}, {"LessOrEqual", "<="}, {"Greater", ">"}, {"GreaterOrEqual", ">="}};
  if (a.size() != 2 || a[0].dtype != a[1].dtype) return absl::UnimplementedError(op + " operands");
  return Operand{"(" + a[0].expr + " " + kOps.at(op) + " " + a[1].expr + ")", DType::kBool};
}

absl::StatusOr<Operand> Logic(const std::string& op, const std::vector<Operand>& a) {
  for (const Operand& o : a) {
    if (o.dtype != DType::kBool) return absl::UnimplementedError(op + " on " + DTypeName(o.dtype));
  }
  if (op == "Not" && a.size() == 1) return Operand{"(!" + a[0].expr + ")", DType::kBool};
  if (a.size() != 2) return absl::UnimplementedError(op + " arity");
  const std::string sym = op == "And" ? " && " : (op == "Or" ? " || " : " != ");
  return Operand{"(" + a[0].expr + sym + a[1].expr + ")", DType::kBool};
}

// The integer range bounds kiln_f2i saturates to, as the reference's IntRange gives them.
bool IntRange(DType t, std::string& lo, std::string& hi, std::string& ilo, std::string& ihi) {
  auto set = [&](const char* a, const char* b, const char* c, const char* d) {
    lo = a; hi = b; ilo = c; ihi = d;
    return true;
  };
  switch (t) {
    case DType::kInt8: return set("-128.0", "127.0", "-128LL", "127LL");
    case DType::kUInt8: return set("0.0", "255.0", "0LL", "255LL");
    case DType::kInt16: return set("-32768.0", "32767.0", "-32768LL", "32767LL");
    case DType::kUInt16: return set("0.0", "65535.0", "0LL", "65535LL");
    case DType::kInt32: return set("-2147483648.0", "2147483647.0", "(-2147483647LL - 1)", "2147483647LL");
    case DType::kUInt32: return set("0.0", "4294967295.0", "0LL", "4294967295LL");
    case DType::kInt64:
      return set("-9223372036854775808.0", "9223372036854775808.0", "(-9223372036854775807LL - 1)",
                 "9223372036854775807LL");
    default: return false;
  }
}

absl::StatusOr<Operand> CastExpr(const Operand& x, DType to) {
  const std::string ct = CType(to);
  if (ct.empty() || !IsCTyped(x.dtype) || x.dtype == DType::kUInt64) {
    return absl::UnimplementedError("Cast " + DTypeName(x.dtype) + " -> " + DTypeName(to));
  }
  const bool from_float = x.dtype == DType::kFloat32 || x.dtype == DType::kFloat64;
  if (to == DType::kBool) return Operand{"(" + x.expr + " != 0)", to};
  std::string lo, hi, ilo, ihi;
  if (from_float && IntRange(to, lo, hi, ilo, ihi)) {
    return Operand{"((" + ct + ")kiln_f2i((double)" + x.expr + ", " + lo + ", " + hi + ", " + ilo +
                       ", " + ihi + "))",
                   to};
  }
  // float <-> double round to nearest; integers convert exactly or wrap (two's complement).
  return Operand{"((" + ct + ")" + x.expr + ")", to};
}

absl::StatusOr<Operand> ClipExpr(const std::vector<Operand>& a) {
  for (const Operand& o : a) {
    if (!o.expr.empty() && o.dtype != DType::kFloat32) return absl::UnimplementedError("Clip dtype");
  }
  // Bounds by comparison: NaN passes, as numpy's clip keeps it.
  std::string e = a[0].expr;
  if (a.size() > 1 && !a[1].expr.empty()) e = "(" + e + " < " + a[1].expr + " ? " + a[1].expr + " : " + e + ")";
  if (a.size() > 2 && !a[2].expr.empty()) e = "(" + e + " > " + a[2].expr + " ? " + a[2].expr + " : " + e + ")";
  return Operand{e, DType::kFloat32};
}

// QuantizeLinear and DequantizeLinear inside FusedElementwise programs, where fuse_elementwise
// admits them per tensor only (scalar scale and zero point; a per-axis scale would broadcast
// along the wrong axis here, so single Q/DQ nodes are not element-wise ops for the emitter).
// Q: saturate(round_half_even(x / scale) + zero), NaN -> 0, as the reference.
absl::StatusOr<Operand> QuantizeExpr(const std::vector<Operand>& a, const Attrs& t) {
  if (a.size() < 2 || a[0].dtype != DType::kFloat32 || a[1].dtype != DType::kFloat32) {
    return absl::UnimplementedError("QuantizeLinear operands");
  }
  const bool zero = a.size() > 2 && !a[2].expr.empty();
  const DType out = zero ? a[2].dtype : static_cast<DType>(t.I("output_dtype", 2));
  if (out != DType::kUInt8 && out != DType::kInt8) {
    return absl::UnimplementedError("QuantizeLinear to " + DTypeName(out));
  }
  const std::string lo = out == DType::kUInt8 ? "0.f" : "-128.f";
  const std::string hi = out == DType::kUInt8 ? "255.f" : "127.f";
  const std::string x = "(" + a[0].expr + ")";
  const std::string q = "rintf(" + x + " / " + a[1].expr + ")" +
                        (zero ? " + (float)" + a[2].expr : "");
  return Operand{"((" + CType(out) + ")(" + x + " != " + x + " ? 0.f : fminf(fmaxf(" + q + ", " +
                     lo + "), " + hi + ")))",
                 out};
}

// DQ: (x - zero) * scale.
absl::StatusOr<Operand> DequantizeExpr(const std::vector<Operand>& a) {
  const DType x = a[0].dtype;
  if (a.size() < 2 || a[1].dtype != DType::kFloat32 ||
      (x != DType::kUInt8 && x != DType::kInt8)) {
    return absl::UnimplementedError("DequantizeLinear operands");
  }
  const bool zero = a.size() > 2 && !a[2].expr.empty();
  const std::string shifted = zero ? "((float)" + a[0].expr + " - (float)" + a[2].expr + ")"
                                   : "(float)" + a[0].expr;
  return Operand{"(" + shifted + " * " + a[1].expr + ")", DType::kFloat32};
}

absl::StatusOr<Operand> IsInfExpr(const Operand& x, const Attrs& t) {
  if (x.dtype != DType::kFloat32) return absl::UnimplementedError("IsInf dtype");
  const std::string inf = FloatLiteral(std::numeric_limits<float>::infinity());
  std::string e = "false";
  if (t.I("detect_positive", 1)) e += " || " + x.expr + " == " + inf;
  if (t.I("detect_negative", 1)) e += " || " + x.expr + " == -" + inf;
  return Operand{"(" + e + ")", DType::kBool};
}

absl::StatusOr<Operand> FloatOp(const std::string& op, const std::vector<Operand>& a, const Attrs& t) {
  for (const Operand& o : a) {
    if (o.dtype != DType::kFloat32) return absl::UnimplementedError(op + " on " + DTypeName(o.dtype));
  }
  Args args;
  for (const Operand& o : a) args.push_back(o.expr);
  auto find = [&](const std::map<std::string, FloatFn>& m, size_t arity) -> const FloatFn* {
    auto it = m.find(op);
    return it != m.end() && a.size() == arity ? &it->second : nullptr;
  };
  if (const FloatFn* f = find(UnaryFloat(), 1)) return Operand{(*f)(args, t), DType::kFloat32};
  if (const FloatFn* f = find(ParamFloat(), 1)) return Operand{(*f)(args, t), DType::kFloat32};
  if (const FloatFn* f = find(BinaryFloat(), 2)) return Operand{(*f)(args, t), DType::kFloat32};
  if (op == "Gelu" && a.size() == 1) {
    const std::string approx = t.S("approximate", "none");
    if (approx != "none" && approx != "tanh") return absl::UnimplementedError("Gelu approximate=" + approx);
    return Operand{(approx == "tanh" ? "kiln_gelu_tanh(" : "kiln_gelu(") + args[0] + ")", DType::kFloat32};
  }
  if (op == "IsNaN" && a.size() == 1) return Operand{"(" + args[0] + " != " + args[0] + ")", DType::kBool};
  return absl::UnimplementedError(op + " with " + std::to_string(a.size()) + " operands");
}

}  // namespace

bool IsElementwiseOpName(const std::string& op) {
  static const std::set<std::string> kOthers = {
      "Add", "Sub", "Mul", "Sum", "Mean", "Max", "Min", "Equal", "Less", "LessOrEqual", "Greater",
      "GreaterOrEqual", "Not", "And", "Or", "Xor", "Where", "Cast", "CastLike", "Identity", "Clip", "Gelu",
      "IsNaN", "IsInf"};
  return kOthers.count(op) || UnaryFloat().count(op) || ParamFloat().count(op) ||
         BinaryFloat().count(op);
}

absl::StatusOr<Operand> OpExpr(const std::string& op, const std::vector<Operand>& args,
                               const std::map<std::string, Attribute>& attrs) {
  const Attrs t(attrs);
  if (args.empty() || args[0].expr.empty()) return absl::UnimplementedError(op + ": no operands");
  for (const Operand& o : args) {
    if (!o.expr.empty() && !IsCTyped(o.dtype)) {
      return absl::UnimplementedError(op + " on " + DTypeName(o.dtype));
    }
  }
  if (op == "Identity" && args.size() == 1) return args[0];
  if (op == "Cast") return CastExpr(args[0], static_cast<DType>(t.I("to", 1)));
  if (op == "Clip") {
    std::vector<Operand> a = args;
    // Clip-6's bounds are attributes (and the epilogue's Clip steps are written that way).
    if (a.size() == 1 && (attrs.count("min") || attrs.count("max"))) {
      const float lo = -std::numeric_limits<float>::infinity(), hi = -lo;
      a.push_back({attrs.count("min") ? FloatLiteral(t.F("min", lo)) : "", DType::kFloat32});
      a.push_back({attrs.count("max") ? FloatLiteral(t.F("max", hi)) : "", DType::kFloat32});
    }
    return ClipExpr(a);
  }
  // Not an ONNX operator: the scaling of Gemm's C that an epilogue applies (alpha).
  if (op == "Scale" && args.size() == 1 && args[0].dtype == DType::kFloat32) {
    return Operand{"(" + args[0].expr + " * " + FloatLiteral(t.F("alpha", 1.f)) + ")", DType::kFloat32};
  }
  if (op == "IsInf" && args.size() == 1) return IsInfExpr(args[0], t);
  if (op == "QuantizeLinear") return QuantizeExpr(args, t);
  if (op == "DequantizeLinear") return DequantizeExpr(args);
  if (op == "Where") {
    if (args.size() != 3 || args[0].dtype != DType::kBool || args[1].dtype != args[2].dtype) {
      return absl::UnimplementedError("Where operands");
    }
    return Operand{"(" + args[0].expr + " ? " + args[1].expr + " : " + args[2].expr + ")", args[1].dtype};
  }
  if (op == "Equal" || op == "Less" || op == "LessOrEqual" || op == "Greater" || op == "GreaterOrEqual") {
    return Compare(op, args);
  }
  if (op == "Not" || op == "And" || op == "Or" || op == "Xor") return Logic(op, args);
  const bool variadic = op == "Add" || op == "Sub" || op == "Mul" || op == "Sum" || op == "Mean" ||
                        op == "Max" || op == "Min";
  if (variadic) {
    for (const Operand& o : args) {
      if (o.dtype != args[0].dtype) return absl::UnimplementedError(op + ": mixed dtypes");
    }
    const bool binary = op == "Add" || op == "Sub" || op == "Mul";
    if (binary && args.size() != 2) return absl::UnimplementedError(op + " arity");
    return Arithmetic(op, args);
  }
  if (op == "Neg" && args[0].dtype != DType::kFloat32 && args[0].dtype != DType::kBool) {
    return Operand{"(-" + args[0].expr + ")", args[0].dtype};
  }
  if (op == "Abs" && args[0].dtype != DType::kFloat32 && args[0].dtype != DType::kBool) {
    return Operand{"(" + args[0].expr + " < 0 ? -" + args[0].expr + " : " + args[0].expr + ")", args[0].dtype};
  }
  return FloatOp(op, args, t);
}

}  // namespace kiln::codegen

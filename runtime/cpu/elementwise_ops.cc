#include "runtime/cpu/elementwise_ops.h"

#include <cmath>
#include <cstring>
#include <map>

#include "runtime/cpu/isa.h"
#include "runtime/cpu/own_kernels.h"
#include "runtime/cpu/quantize_math.h"
#include "runtime/cpu/vector_math.h"

namespace kiln::cpu::ew {
namespace {

struct OpInfo {
  Op op;
  size_t arity;  // 0: Clip's 1..3
};

const std::map<std::string, OpInfo>& Ops() {
  static const auto* ops = new std::map<std::string, OpInfo>{
      {"Add", {Op::kAdd, 2}}, {"Sub", {Op::kSub, 2}}, {"Mul", {Op::kMul, 2}},
      {"Div", {Op::kDiv, 2}}, {"Pow", {Op::kPow, 2}}, {"Max", {Op::kMax, 2}},
      {"Min", {Op::kMin, 2}}, {"Sum", {Op::kAdd, 2}}, {"Mean", {Op::kMean, 2}},
      {"PRelu", {Op::kPRelu, 2}}, {"Neg", {Op::kNeg, 1}}, {"Abs", {Op::kAbs, 1}},
      {"Exp", {Op::kExp, 1}}, {"Log", {Op::kLog, 1}}, {"Sqrt", {Op::kSqrt, 1}},
      {"Reciprocal", {Op::kRecip, 1}}, {"Relu", {Op::kRelu, 1}},
      {"Sigmoid", {Op::kSigmoid, 1}}, {"Tanh", {Op::kTanh, 1}}, {"Erf", {Op::kErf, 1}},
      {"LeakyRelu", {Op::kLeakyRelu, 1}}, {"HardSigmoid", {Op::kHardSigmoid, 1}},
      {"HardSwish", {Op::kHardSwish, 1}}, {"Gelu", {Op::kGelu, 1}}, {"Elu", {Op::kElu, 1}},
      {"Celu", {Op::kCelu, 1}}, {"Selu", {Op::kSelu, 1}}, {"Softplus", {Op::kSoftplus, 1}},
      {"Softsign", {Op::kSoftsign, 1}}, {"Mish", {Op::kMish, 1}},
      {"ThresholdedRelu", {Op::kThresholdedRelu, 1}}, {"Shrink", {Op::kShrink, 1}},
      {"Ceil", {Op::kCeil, 1}}, {"Floor", {Op::kFloor, 1}}, {"Round", {Op::kRound, 1}},
      {"Sign", {Op::kSign, 1}}, {"Sin", {Op::kSin, 1}}, {"Cos", {Op::kCos, 1}},
      {"Tan", {Op::kTan, 1}}, {"Asin", {Op::kAsin, 1}}, {"Acos", {Op::kAcos, 1}},
      {"Atan", {Op::kAtan, 1}}, {"Sinh", {Op::kSinh, 1}}, {"Cosh", {Op::kCosh, 1}},
      {"Asinh", {Op::kAsinh, 1}}, {"Acosh", {Op::kAcosh, 1}}, {"Atanh", {Op::kAtanh, 1}},
      {"Clip", {Op::kClip, 0}},
      // Not an ONNX op: the x * Sigmoid(x) epilogue step the optimizer recognizes.
      {"SiLU", {Op::kSilu, 1}}};
  return *ops;
}

float Clamp01(float v) { return v < 0.f ? 0.f : (v > 1.f ? 1.f : v); }

float Softplus(float v) { return v > 0.f ? v + std::log1p(std::exp(-v)) : std::log1p(std::exp(v)); }

}  // namespace

std::optional<Instr> MakeInstr(const std::string& name, size_t arity, const FloatAttr& f,
                               const StringAttr& s) {
  auto it = Ops().find(name);
  if (it == Ops().end()) return std::nullopt;
  const OpInfo& info = it->second;
  if (info.arity == 0 ? (arity < 1 || arity > 3) : arity != info.arity) return std::nullopt;
  Instr i{info.op, {}, 0.f, 0.f};
  switch (info.op) {
    case Op::kLeakyRelu: i.alpha = f("alpha", 0.01f); break;
    case Op::kHardSigmoid: i.alpha = f("alpha", 0.2f); i.beta = f("beta", 0.5f); break;
    case Op::kElu: case Op::kThresholdedRelu: i.alpha = f("alpha", 1.f); break;
    case Op::kCelu:
      i.alpha = f("alpha", 1.f);
      if (i.alpha == 0.f) return std::nullopt;  // the reference reports it
      break;
    case Op::kSelu:
      i.alpha = f("alpha", 1.67326319217681884765625f);
      i.beta = f("gamma", 1.05070102214813232421875f);
      break;
    case Op::kShrink: i.alpha = f("lambd", 0.5f); i.beta = f("bias", 0.f); break;
    case Op::kGelu: {
      const std::string approx = s("approximate", "none");
      if (approx == "tanh") i.op = Op::kGeluTanh;
      else if (approx != "none") return std::nullopt;
      break;
    }
    default: break;
  }
  return i;
}

namespace {

// The activations (parameterized, piecewise or exp-based); false for any other op.
KILN_ISA_BODY bool ActivationBody(const Instr& ins, const float* a, float* y, int64_t n) {
  const float al = ins.alpha, be = ins.beta;
  switch (ins.op) {
    // NaN stays NaN, as in the reference (numpy's maximum).
    case Op::kRelu: for (int64_t i = 0; i < n; ++i) y[i] = a[i] < 0.f ? 0.f : a[i]; break;
    case Op::kSigmoid: for (int64_t i = 0; i < n; ++i) y[i] = 1.f / (1.f + vmath::Exp(-a[i])); break;
    case Op::kLeakyRelu: for (int64_t i = 0; i < n; ++i) y[i] = a[i] < 0.f ? al * a[i] : a[i]; break;
    // Clamps by comparison, not fmin/fmax (which return the other operand for NaN): NaN
    // stays NaN, as numpy's clip and maximum keep it.
    case Op::kHardSigmoid:
      for (int64_t i = 0; i < n; ++i) y[i] = Clamp01(al * a[i] + be);
      break;
    case Op::kHardSwish:
      for (int64_t i = 0; i < n; ++i) y[i] = a[i] * Clamp01(a[i] / 6.f + 0.5f);
      break;
    case Op::kGelu:
      for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * a[i] * (1.f + vmath::Erf(a[i] * 0.70710678118654752f));
      break;
    case Op::kGeluTanh:
      for (int64_t i = 0; i < n; ++i) {
        const float v = a[i];
        y[i] = 0.5f * v * (1.f + vmath::Tanh(0.79788456080286536f * (v + 0.044715f * v * v * v)));
      }
      break;
    case Op::kElu: for (int64_t i = 0; i < n; ++i) y[i] = a[i] < 0.f ? al * std::expm1(a[i]) : a[i]; break;
    case Op::kCelu:
      for (int64_t i = 0; i < n; ++i) {
        const float e = al * std::expm1(a[i] / al);
        y[i] = (a[i] < 0.f ? 0.f : a[i]) + (e > 0.f ? 0.f : e);
      }
      break;
    case Op::kSelu:
      for (int64_t i = 0; i < n; ++i) y[i] = a[i] > 0.f ? be * a[i] : be * al * std::expm1(a[i]);
      break;
    case Op::kSoftplus: for (int64_t i = 0; i < n; ++i) y[i] = Softplus(a[i]); break;
    case Op::kSilu:
      for (int64_t i = 0; i < n; ++i) y[i] = a[i] * (1.f / (1.f + vmath::Exp(-a[i])));
      break;
    case Op::kSoftsign: for (int64_t i = 0; i < n; ++i) y[i] = a[i] / (1.f + std::fabs(a[i])); break;
    case Op::kMish: for (int64_t i = 0; i < n; ++i) y[i] = a[i] * std::tanh(Softplus(a[i])); break;
    case Op::kThresholdedRelu: for (int64_t i = 0; i < n; ++i) y[i] = a[i] > al ? a[i] : 0.f; break;
    case Op::kShrink:
      for (int64_t i = 0; i < n; ++i) y[i] = a[i] < -al ? a[i] + be : (a[i] > al ? a[i] - be : 0.f);
      break;
    default: return false;
  }
  return true;
}


}  // namespace

KILN_ISA_BODY void UnaryBody(const Instr& ins, const float* a, float* y, int64_t n) {
  if (ActivationBody(ins, a, y, n)) return;
  switch (ins.op) {
    case Op::kNeg: for (int64_t i = 0; i < n; ++i) y[i] = -a[i]; break;
    case Op::kAbs: for (int64_t i = 0; i < n; ++i) y[i] = std::fabs(a[i]); break;
    case Op::kExp: for (int64_t i = 0; i < n; ++i) y[i] = vmath::Exp(a[i]); break;
    case Op::kLog: for (int64_t i = 0; i < n; ++i) y[i] = std::log(a[i]); break;
    case Op::kSqrt: for (int64_t i = 0; i < n; ++i) y[i] = std::sqrt(a[i]); break;
    case Op::kRecip: for (int64_t i = 0; i < n; ++i) y[i] = 1.f / a[i]; break;
    case Op::kTanh: for (int64_t i = 0; i < n; ++i) y[i] = vmath::Tanh(a[i]); break;
    case Op::kErf: for (int64_t i = 0; i < n; ++i) y[i] = vmath::Erf(a[i]); break;
    case Op::kCeil: for (int64_t i = 0; i < n; ++i) y[i] = std::ceil(a[i]); break;
    case Op::kFloor: for (int64_t i = 0; i < n; ++i) y[i] = std::floor(a[i]); break;
    // Halves to even, as ONNX specifies (std::round would round them away from zero).
    case Op::kRound: for (int64_t i = 0; i < n; ++i) y[i] = std::nearbyint(a[i]); break;
    case Op::kSign:
      for (int64_t i = 0; i < n; ++i) y[i] = a[i] > 0.f ? 1.f : (a[i] < 0.f ? -1.f : a[i]);
      break;
    case Op::kSin: for (int64_t i = 0; i < n; ++i) y[i] = std::sin(a[i]); break;
    case Op::kCos: for (int64_t i = 0; i < n; ++i) y[i] = std::cos(a[i]); break;
    case Op::kTan: for (int64_t i = 0; i < n; ++i) y[i] = std::tan(a[i]); break;
    case Op::kAsin: for (int64_t i = 0; i < n; ++i) y[i] = std::asin(a[i]); break;
    case Op::kAcos: for (int64_t i = 0; i < n; ++i) y[i] = std::acos(a[i]); break;
    case Op::kAtan: for (int64_t i = 0; i < n; ++i) y[i] = std::atan(a[i]); break;
    case Op::kSinh: for (int64_t i = 0; i < n; ++i) y[i] = std::sinh(a[i]); break;
    case Op::kCosh: for (int64_t i = 0; i < n; ++i) y[i] = std::cosh(a[i]); break;
    case Op::kAsinh: for (int64_t i = 0; i < n; ++i) y[i] = std::asinh(a[i]); break;
    case Op::kAcosh: for (int64_t i = 0; i < n; ++i) y[i] = std::acosh(a[i]); break;
    case Op::kAtanh: for (int64_t i = 0; i < n; ++i) y[i] = std::atanh(a[i]); break;
    case Op::kDequantize:
      for (int64_t i = 0; i < n; ++i) y[i] = qmath::Dequantize(a[i], ins.alpha, ins.beta);
      break;
    case Op::kQuantize: {
      const float s = ins.alpha, z = ins.beta, lo = ins.lo, hi = ins.hi;
      for (int64_t i = 0; i < n; ++i) y[i] = qmath::Quantize(a[i], s, z, lo, hi);
      break;
    }
    default: std::memmove(y, a, n * sizeof(float)); break;  // kCast: converted on load
  }
}
KILN_ISA_VERSIONS(void, Unary, (const Instr& ins, const float* a, float* y, int64_t n),
                  (ins, a, y, n))


KILN_ISA_BODY void BinaryBody(Op op, const float* a, const float* b, float* y, int64_t n) {
  switch (op) {
    case Op::kAdd: for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i]; break;
    case Op::kSub: for (int64_t i = 0; i < n; ++i) y[i] = a[i] - b[i]; break;
    case Op::kMul: for (int64_t i = 0; i < n; ++i) y[i] = a[i] * b[i]; break;
    case Op::kPow: for (int64_t i = 0; i < n; ++i) y[i] = std::pow(a[i], b[i]); break;
    // Max/Min propagate NaN from either side, like numpy's maximum/minimum.
    case Op::kMax:
      for (int64_t i = 0; i < n; ++i) y[i] = a[i] != a[i] ? a[i] : (b[i] != b[i] || b[i] > a[i] ? b[i] : a[i]);
      break;
    case Op::kMin:
      for (int64_t i = 0; i < n; ++i) y[i] = a[i] != a[i] ? a[i] : (b[i] != b[i] || b[i] < a[i] ? b[i] : a[i]);
      break;
    case Op::kMean: for (int64_t i = 0; i < n; ++i) y[i] = (a[i] + b[i]) * 0.5f; break;
    case Op::kPRelu: for (int64_t i = 0; i < n; ++i) y[i] = a[i] < 0.f ? b[i] * a[i] : a[i]; break;
    default: for (int64_t i = 0; i < n; ++i) y[i] = a[i] / b[i]; break;
  }
}
KILN_ISA_VERSIONS(void, Binary, (Op op, const float* a, const float* b, float* y, int64_t n),
                  (op, a, b, y, n))


template <class T>
KILN_ISA_BODY void StoreLoop(const float* a, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<T>(static_cast<int32_t>(a[i]));
}

KILN_ISA_BODY void StoreIntegersBody(DType t, const float* a, void* y, int64_t n) {
  switch (t) {
    case DType::kUInt8: StoreLoop(a, static_cast<uint8_t*>(y), n); break;
    case DType::kInt8: StoreLoop(a, static_cast<int8_t*>(y), n); break;
    case DType::kUInt16: StoreLoop(a, static_cast<uint16_t*>(y), n); break;
    default: StoreLoop(a, static_cast<int16_t*>(y), n); break;
  }
}
KILN_ISA_VERSIONS(void, StoreIntegers, (DType t, const float* a, void* y, int64_t n), (t, a, y, n))

template <class T>
KILN_ISA_BODY void WidenLoop(const T* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(x[i]);
}

KILN_ISA_BODY void WidenBody(DType t, const void* x, float* y, int64_t n) {
  switch (t) {
    case DType::kUInt8: WidenLoop(static_cast<const uint8_t*>(x), y, n); break;
    case DType::kInt8: WidenLoop(static_cast<const int8_t*>(x), y, n); break;
    case DType::kUInt16: WidenLoop(static_cast<const uint16_t*>(x), y, n); break;
    default: WidenLoop(static_cast<const int16_t*>(x), y, n); break;
  }
}
KILN_ISA_VERSIONS(void, Widen, (DType t, const void* x, float* y, int64_t n), (t, x, y, n))

bool WidenToFloat(DType t, const void* x, float* y, int64_t n) {
  if (t != DType::kUInt8 && t != DType::kInt8 && t != DType::kUInt16 && t != DType::kInt16) {
    return false;
  }
  Widen(t, x, y, n);
  return true;
}


void ClipTile(const float* x, const float* lo, const float* hi, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i];
    if (lo && v < lo[i]) v = lo[i];
    if (hi && v > hi[i]) v = hi[i];
    y[i] = v;
  }
}

}  // namespace kiln::cpu::ew

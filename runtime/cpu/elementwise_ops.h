// Internal to runtime/cpu: the float32 operations of the element-wise kernel (one ai.onnx
// element-wise op, or one instruction of an ai.kiln.FusedElementwise program), each run over
// a tile of contiguous operands. Formulas follow the reference kernels (and so ONNX's
// NumPy definitions), computed in float.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ir/dtype.h"

namespace kiln::cpu::ew {

enum class Op {
  // two operands
  kAdd, kSub, kMul, kDiv, kPow, kMax, kMin, kMean, kPRelu,
  // one operand
  kNeg, kAbs, kExp, kLog, kSqrt, kRecip, kRelu, kSigmoid, kTanh, kErf, kLeakyRelu,
  kHardSigmoid, kHardSwish, kGelu, kGeluTanh, kElu, kCelu, kSelu, kSoftplus, kSoftsign, kMish,
  kThresholdedRelu, kShrink, kSilu, kCeil, kFloor, kRound, kSign, kSin, kCos, kTan, kAsin, kAcos,
  kAtan, kSinh, kCosh, kAsinh, kAcosh, kAtanh,
  // one to three operands (min and max optional)
  kClip,
  // a program's Cast to float: the operand was converted on load, so a copy
  kCast,
  // a program's per-tensor DequantizeLinear of an 8/16-bit input (converted to float on load):
  // (a - beta) * alpha, beta the zero point and alpha the scale
  kDequantize,
  // a program's per-tensor QuantizeLinear (its last instruction): the quantized value as an
  // integral float, saturated to [lo, hi] (quantize_math.h); StoreIntegers writes it out
  kQuantize,
};

struct Instr {
  Op op;
  std::vector<int> args;  // register numbers (inputs first, then instruction results)
  float alpha = 0.f, beta = 0.f;  // the op's parameters (see MakeInstr)
  float lo = 0.f, hi = 0.f;       // kQuantize: the quantized type's range
};

// Reads an attribute: (name, default) -> value.
using FloatAttr = std::function<float(const char*, float)>;
using StringAttr = std::function<std::string(const char*, const char*)>;

// The instruction for ONNX op `op` with `arity` operands, its parameters read through the
// getters; nullopt when the kernel does not have the op (or not with that many operands).
std::optional<Instr> MakeInstr(const std::string& op, size_t arity, const FloatAttr& f,
                               const StringAttr& s);

// y[i] = op(a[i]) for n elements (a and y may be the same buffer).
void Unary(const Instr& ins, const float* a, float* y, int64_t n);
// y[i] = op(a[i], b[i]).
void Binary(Op op, const float* a, const float* b, float* y, int64_t n);
// Clip with optional lower (lo) and upper (hi) bounds per element; NaN passes through.
void ClipTile(const float* x, const float* lo, const float* hi, float* y, int64_t n);
// y[i] = a[i] as type t (uint8, int8, uint16, int16) for integral a[i] within t's range
// (what kQuantize computes).
void StoreIntegers(DType t, const float* a, void* y, int64_t n);
// y[i] = float(x[i]) for n contiguous elements of type t (uint8, int8, uint16, int16: exact),
// vectorized at every ISA level; false (nothing written) for another type.
bool WidenToFloat(DType t, const void* x, float* y, int64_t n);

// A whole program that is a scale and a shift (in either order, one of them optional) of one
// operand with an optional ReLU after: an inference BatchNorm that folded into no convolution
// (a pre-activation network's BatchNorm -> ReLU over a concatenation or a sum), or a
// residual Add -> ReLU. Run as one pass over the tile instead of an instruction at a time,
// which reads and writes every intermediate (elementwise_affine.cc).
struct AffineChain {
  int x = -1;              // the operand scaled and shifted
  int scale = -1;          // the operand it is multiplied by; -1: none
  int shift = -1;          // the operand added; -1: none
  bool add_first = false;  // (x + shift) * scale rather than x * scale + shift
  bool relu = false;       // max(., 0) after, NaN kept
};

// The chain `prog` is, reading only operands below `operands` besides its own results;
// nullopt for any other program (and for a single instruction, already one pass).
std::optional<AffineChain> MatchAffineChain(const std::vector<Instr>& prog, size_t operands);
// y[i] = the chain at i, every operand a tile of n (scale or shift null when absent); rounded
// as the separate instructions round (no fused multiply-add), so the bits do not change.
void AffineTile(const AffineChain& f, const float* x, const float* scale, const float* shift,
                float* y, int64_t n);

}  // namespace kiln::cpu::ew

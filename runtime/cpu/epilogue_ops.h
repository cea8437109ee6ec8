// Internal to runtime/cpu: an ai.kiln epilogue's activation steps run as own element-wise
// operations (IEEE semantics as ONNX computes them: NaN stays NaN), for the kernels that apply
// an epilogue themselves (the own GEMM's tiles, a convolution's exact path), and the bound of
// a step's output for the non-finite guard.
#pragma once

#include <cstdint>
#include <optional>

#include "ir/kiln_ops.h"
#include "runtime/cpu/elementwise_ops.h"

namespace kiln::cpu {

struct EpilogueActivation {
  bool clip = false;  // Clip(lo, hi) by comparison (NaN passes), else `instr`
  float lo = 0.f, hi = 0.f;
  ew::Instr instr{ew::Op::kRelu, {}, 0.f, 0.f};
};

// nullopt for "Add" and for steps the own ops do not have.
std::optional<EpilogueActivation> MakeEpilogueActivation(const kiln_ops::EpilogueStep& step);
// y[i] = act(y[i]) for n elements.
void ApplyActivation(const EpilogueActivation& act, float* y, int64_t n);

// An upper bound of |act(v)| for every finite v with |v| <= b; +inf when the step is not
// known to keep finite values bounded that way.
float ActivationBound(const kiln_ops::EpilogueStep& step, float b);

}  // namespace kiln::cpu

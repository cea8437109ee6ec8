// recognize_patterns: primitive chains that exporters emit for operators the target opset
// lacks (PyTorch 1.13, ai.onnx 13-17) become the single operator, so later fusions and the
// backends see one op with a dedicated kernel instead of 5-10 element-wise passes over memory:
//  - LayerNormalization: ReduceMean(x, trailing axes) -> Sub -> Pow(2) -> ReduceMean -> Add(eps)
//    -> Sqrt -> Div -> [Mul(gamma)] -> [Add(beta)]; axis = -k for k reduced trailing axes,
//    epsilon from the constant, gamma/beta expanded to the normalized shape (ones/zeros when
//    absent).
//  - Gelu: the erf form x * 0.5 * (1 + Erf(x / sqrt(2))) and the tanh form
//    0.5 * x * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x^3))) (approximate = "tanh"), in the
//    usual operand orders; constants compared within 1e-4 relative.
//  - HardSwish: x * HardSigmoid(x, 1/6, 0.5) and x * Clip(x + 3, 0, 6) / 6.
//  - SiLU: x * Sigmoid(x) becomes an ai.kiln FusedElementwise [Sigmoid(x), Mul(x, r0)].
// Preconditions: shapes inferred (LayerNorm needs x's rank and static normalized dims);
// ReduceMean axes as the opset-18 constant input (what the importer normalizes to).
// Leaves alone: any pattern whose intermediate value has a reader outside the pattern or is a
// graph output (it must stay computed); ReduceMean with keepdims=0 or non-trailing axes;
// parameters that are not constants or vary along non-normalized axes; non-float tensors;
// SiLU whose x comes from Conv/Gemm/MatMul (fuse_*_epilogue fuses it there as an epilogue).
#pragma once

#include "compiler/passes/pass.h"

namespace kiln::passes {

absl::StatusOr<bool> RecognizePatterns(Graph& graph);

class RecognizePatternsPass : public Pass {
 public:
  std::string name() const override { return "recognize_patterns"; }

 protected:
  absl::StatusOr<bool> RunImpl(Graph& graph) override { return RecognizePatterns(graph); }
};

}  // namespace kiln::passes

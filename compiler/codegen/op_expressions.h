// The C expression of one ONNX element-wise operator (or an ai.kiln epilogue step) over
// operand expressions, as the element-wise and epilogue kernels compute it. Formulas follow
// the reference interpreter (ONNX's NumPy definitions) computed in float: NaN stays NaN where
// numpy keeps it (Relu, Max, Clip compare instead of calling fmaxf), Round halves to even.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "ir/graph.h"

namespace kiln::codegen {

struct Operand {
  std::string expr;  // "" for an omitted optional operand (Clip's bounds)
  DType dtype = DType::kUndefined;
};

// op(args) with the op's attributes; the result's expression and dtype. Float ops take
// float32 operands only; comparisons, logic, Where, Cast, Identity and the plain arithmetic
// (Add Sub Mul Neg Abs Max Min) also take the other C-typed dtypes. UNIMPLEMENTED for
// anything else (the operator, its arity or its operand dtypes).
absl::StatusOr<Operand> OpExpr(const std::string& op, const std::vector<Operand>& args,
                               const std::map<std::string, Attribute>& attrs);

// Whether OpExpr knows `op` at all (for some arity and dtypes).
bool IsElementwiseOpName(const std::string& op);

}  // namespace kiln::codegen

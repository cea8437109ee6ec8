// assign_precision: marks the matrix products a backend may compute in bfloat16 (attribute
// kiln_precision = "bf16", ir/kiln_ops.h). Runs only when the compile asks for a
// lower precision (PipelineOptions::precision, set by kilnd's `precision: {mode: auto}` on a
// CPU with native bf16 products); the warm-up check then bounds the error against the float32
// reference and the server falls back to float32 when it exceeds the model's budget.
// Marks: MatMul, Gemm, FusedMatMul, Conv and FusedConv whose weights (input 1) are a constant
// float32 tensor of rank >= 2 (the products whose cost is the model's cost, and whose bf16
// copy is packed once at build).
// "bf16-mixed" (the server's second try when "bf16" exceeds the budget) also leaves in float32
// the weight products upstream of a Softmax along its score path (through layout, scaling,
// masking ops and the q @ k^T product): attention's query and key projections, whose rounding
// exp() amplifies. Leaves alone: products of two activations (attention's scores and mixing: two
// per-run conversions would cost what bf16 saves there), non-float32 products, and everything else.
#pragma once

#include "compiler/passes/pass.h"

namespace kiln::passes {

// The precisions below float32 a compile may ask for: "bf16" and "bf16-mixed".
inline bool IsLowerPrecision(const std::string& precision) {
  return precision == "bf16" || precision == "bf16-mixed";
}

absl::StatusOr<bool> AssignPrecision(Graph& graph, const std::string& precision);

class AssignPrecisionPass : public Pass {
 public:
  // precision: "bf16" or "bf16-mixed".
  explicit AssignPrecisionPass(std::string precision = "bf16") : precision_(std::move(precision)) {}
  std::string name() const override { return "assign_precision"; }

 protected:
  absl::StatusOr<bool> RunImpl(Graph& graph) override { return AssignPrecision(graph, precision_); }

 private:
  std::string precision_;
};

}  // namespace kiln::passes

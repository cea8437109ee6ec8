// What a matrix product node asks for, read once for both of the CPU engine's GEMM paths
// (oneDNN's matmul in dnnl_matmul.cc, Kiln's GEMM in gemm_kernel.cc): MatMul, Gemm or
// ai.kiln.FusedMatMul (ir/kiln_ops.h).
#pragma once

#include <cstdlib>
#include <optional>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "ir/kiln_ops.h"

namespace kiln::cpu {

struct MatMulSpec {
  bool trans_a = false, trans_b = false;
  // kiln_precision "bf16" on a product with constant weights (oneDNN's path takes it: A is
  // converted to bf16 each run and B once, at build; the result stays float32).
  bool bf16 = false;
  float alpha = 1.f, beta = 1.f;
  std::vector<kiln_ops::EpilogueStep> steps;
};

// KILN_CPU_GEMM: "own" or "onednn" sends every product that path can take to it (to measure
// either side), "" (unset) lets each product's shape decide. Read once.
inline std::string_view ForcedGemm() {
  static const char* force = std::getenv("KILN_CPU_GEMM");
  return force ? force : "";
}

// nullopt for any other node.
inline std::optional<MatMulSpec> ReadMatMulSpec(const Node& node) {
  MatMulSpec s;
  const bool fused = node.domain == kKilnDomain && node.op_type == kiln_ops::kFusedMatMul;
  const bool gemm = node.domain.empty() && node.op_type == "Gemm";
  if (!fused && !gemm && !(node.domain.empty() && node.op_type == "MatMul")) return std::nullopt;
  if (fused || gemm) {
    s.trans_a = node.GetInt("transA", 0) != 0;
    s.trans_b = node.GetInt("transB", 0) != 0;
    s.alpha = node.GetFloat("alpha", 1.f);
    s.beta = node.GetFloat("beta", 1.f);
  }
  if (fused) s.steps = kiln_ops::ReadEpilogue(node);
  s.bf16 = node.GetString(kiln_ops::kPrecisionAttr, "") == "bf16" && node.input(1) &&
           node.input(1)->is_constant();
  return s;
}

}  // namespace kiln::cpu

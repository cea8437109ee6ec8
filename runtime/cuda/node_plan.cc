#include "runtime/cuda/node_plan.h"

#include "compiler/codegen/emit.h"
#include "compiler/plan/memory_plan.h"
#include "ir/kiln_ops.h"

namespace kiln::cuda {
namespace {

bool IsConv(const Node& n) {
  return (n.domain.empty() && n.op_type == "Conv") ||
         (n.domain == kKilnDomain && n.op_type == kiln_ops::kFusedConv);
}

bool IsMatmul(const Node& n) {
  return (n.domain.empty() && (n.op_type == "MatMul" || n.op_type == "Gemm")) ||
         (n.domain == kKilnDomain && n.op_type == kiln_ops::kFusedMatMul);
}

NodePlan Fallback(const absl::Status& why) {
  NodePlan p;
  p.kind = NodeKind::kFallback;
  p.reason = std::string(why.message());
  return p;
}

// Adds the generated epilogue of a library call, when it has one.
absl::Status AddEpilogue(bool needed, const codegen::EpilogueSpec& spec, const std::string& name,
                         NodePlan& p) {
  if (!needed) return absl::OkStatus();
  ASSIGN_OR_RETURN(codegen::Kernel k, codegen::EmitEpilogue(spec, name + "_epilogue"));
  p.kernels.push_back(std::move(k));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<NodePlan> PlanNode(const Node& node, const std::string& name,
                                  const NodePlanOptions& options) {
  NodePlan p;
  if (plan::IsViewOp(node)) {
    p.kind = NodeKind::kView;
    return p;
  }
  absl::Status st;
  if (IsConv(node)) {
    absl::StatusOr<ConvPlan> c = PlanConv(node, {options.fuse_activations});
    if (c.ok()) {
      p.kind = NodeKind::kConv;
      p.conv = std::move(*c);
      st = AddEpilogue(p.conv.has_epilogue, p.conv.epilogue, name, p);
      if (st.ok()) return p;
    } else {
      st = c.status();
    }
  } else if (IsMatmul(node)) {
    absl::StatusOr<MatmulPlan> m = PlanMatmul(node, {options.fuse_activations});
    if (m.ok()) {
      p.kind = NodeKind::kMatmul;
      p.matmul = std::move(*m);
      st = AddEpilogue(p.matmul.has_epilogue, p.matmul.tail, name, p);
      if (st.ok()) return p;
    } else {
      st = m.status();
    }
  } else if (codegen::HasGenerator(node)) {
    absl::StatusOr<std::vector<codegen::Kernel>> ks = codegen::EmitNodeKernels(node, name);
    if (ks.ok()) {
      p.kind = NodeKind::kGenerated;
      p.kernels = std::move(*ks);
      return p;
    }
    st = ks.status();
  } else {
    st = absl::UnimplementedError("no CUDA kernel for " + node.Describe());
  }
  if (!absl::IsUnimplemented(st)) return st;
  return Fallback(st);
}

const char* NodeKindName(NodeKind kind) {
  switch (kind) {
    case NodeKind::kView: return "view";
    case NodeKind::kConv: return "cudnn";
    case NodeKind::kMatmul: return "cublaslt";
    case NodeKind::kGenerated: return "generated";
    case NodeKind::kFallback: return "host fallback";
  }
  return "?";
}

}  // namespace kiln::cuda

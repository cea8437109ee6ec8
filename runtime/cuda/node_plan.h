// How the CUDA engine runs each node, decided without a device (pure, unit-tested): a view
// (no work when it shares its input's bytes), a cuDNN convolution, a cuBLASLt product, a
// generated kernel, or the reference kernel on the host (fallback, with the reason).
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "compiler/codegen/cuda_kernel.h"
#include "ir/graph.h"
#include "runtime/cuda/conv_plan.h"
#include "runtime/cuda/matmul_plan.h"

namespace kiln::cuda {

enum class NodeKind { kView, kConv, kMatmul, kGenerated, kFallback };

struct NodePlan {
  NodeKind kind = NodeKind::kFallback;
  std::string reason;  // kFallback: why no device path took the node
  ConvPlan conv;       // kConv
  MatmulPlan matmul;   // kMatmul
  // kGenerated: the node's kernels; kConv / kMatmul: the epilogue kernel, if any.
  std::vector<codegen::Kernel> kernels;
};

struct NodePlanOptions {
  bool fuse_activations = true;
};

// `name` prefixes the node's kernel names (unique per engine). Errors other than
// UNIMPLEMENTED (a malformed node) are returned; UNIMPLEMENTED becomes a fallback.
absl::StatusOr<NodePlan> PlanNode(const Node& node, const std::string& name,
                                  const NodePlanOptions& options = {});

const char* NodeKindName(NodeKind kind);

}  // namespace kiln::cuda

#include "compiler/passes/fold_constants.h"

#include "ir/graph_edit.h"
#include "ops/evaluate.h"
#include "ops/kernel.h"

namespace kiln::passes {
namespace {

// Inputs all constant (at least one input, or none for source ops such as EyeLike-free ones).
bool AllInputsConstant(const Node& n) {
  for (const Value* in : n.inputs) {
    if (in && !in->constant) return false;
  }
  return true;
}

bool WithinSizeCap(const Node& n, const FoldConstantsOptions& options) {
  size_t in_bytes = 0, out_bytes = 0;
  for (const Value* in : n.inputs) {
    if (in) in_bytes += in->constant->nbytes();
  }
  for (const Value* out : n.outputs) {
    if (!out) continue;
    if (!out->shape || !IsStatic(*out->shape) || DTypeSize(out->dtype) == 0) return false;
    out_bytes += static_cast<size_t>(NumElements(StaticDims(*out->shape))) *
                 DTypeSize(out->dtype);
  }
  // A DequantizeLinear of constant weights is the float weights a backend without int8
  // kernels needs anyway (fuse_qdq, which runs first at O2, has taken the ones an int8 kernel
  // can use): it may grow to float32 (8-bit -> 4x).
  if (n.domain.empty() && n.op_type == "DequantizeLinear") in_bytes *= 4;
  return out_bytes <= std::max(options.max_growth_bytes, in_bytes);
}

// The node's outputs over these constant inputs: from the cache when an earlier compile of
// the same model folded the same buffers, else from the reference kernel.
absl::StatusOr<std::vector<Tensor>> Evaluate(const Node& n, const ref::KernelInputs& inputs,
                                             FoldCache* cache) {
  const bool cached = cache && FoldCache::Worth(inputs);
  if (cached) {
    if (std::optional<std::vector<Tensor>> hit = cache->Find(n, inputs)) return std::move(*hit);
  }
  absl::StatusOr<std::vector<Tensor>> outs = ref::EvaluateConstantNode(n);
  if (cached && outs.ok()) cache->Store(n, inputs, *outs);
  return outs;
}

}  // namespace

absl::StatusOr<bool> FoldConstants(Graph& graph, const FoldConstantsOptions& options) {
  std::vector<Node*> folded;
  for (const auto& node : graph.nodes()) {
    Node& n = *node;
    if (!AllInputsConstant(n) || !ref::IsDeterministic(n) || !WithinSizeCap(n, options)) continue;
    ref::KernelInputs inputs;
    for (const Value* in : n.inputs) inputs.push_back(in ? &*in->constant : nullptr);
    absl::StatusOr<std::vector<Tensor>> outs = Evaluate(n, inputs, options.cache.get());
    if (!outs.ok()) continue;  // the engine reports it at run time, with the real inputs
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      Value* out = n.outputs[i];
      if (!out) continue;
      out->dtype = (*outs)[i].dtype();
      out->shape = ToShape((*outs)[i].shape());
      out->constant = std::move((*outs)[i]);
    }
    folded.push_back(&n);
  }
  RemoveNodes(graph, folded);
  if (!folded.empty()) graph.PruneUnusedValues();
  return !folded.empty();
}

}  // namespace kiln::passes

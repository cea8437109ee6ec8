// fuse_concat_elementwise: a channel Concat whose one reader is a FusedElementwise program
// becomes that program's first operand (`concat_inputs`, kiln_ops.h): the program reads the
// pieces where their producers wrote them, and the concatenation is never written. DenseNet
// concatenates every earlier feature map before each layer's BatchNorm + ReLU (folded into
// one program), so each layer copied the whole block's features again (densenet121 b8:
// 62 Concats, ~7 % of a run).
// Preconditions: shapes inferred and static, element-wise chains fused (fuse_elementwise).
// Fuses when: Concat along axis 1 of float32 inputs of rank 3..5, its output no graph output
// and read once, by a float FusedElementwise without Q/DQ or Cast instructions and not
// already fused so, whose output is the Concat's shape and whose other operands are
// per-channel, per-image or scalar ([N or 1, C or 1, 1, ...]): a backend may then run the
// program piece by piece on channel slices. Leaves alone anything else (another reader, a
// broadcast that grows the output, a full-shape second operand).
#pragma once

#include "compiler/passes/pass.h"

namespace kiln::passes {

absl::StatusOr<bool> FuseConcatElementwise(Graph& graph);

class FuseConcatElementwisePass : public Pass {
 public:
  std::string name() const override { return "fuse_concat_elementwise"; }

 protected:
  absl::StatusOr<bool> RunImpl(Graph& graph) override { return FuseConcatElementwise(graph); }
};

}  // namespace kiln::passes

// fuse_qdq: the int8 lowering of QDQ-format models (the form ONNX Runtime's quantization tool,
// PyTorch and TensorRT's toolkits write): a float Conv whose activation and weights come
// through DequantizeLinear and whose result goes through QuantizeLinear,
//
//   DQ(xq, sx, zx) -> Conv(., DQ(wq, sw, 0), bias?) [-> Relu | Clip] -> Q(sy, zy)
//
// becomes QLinearConv(xq, sx, zx, wq, sw, 0, sy, zy, bias_int32), which backends run as an
// integer convolution (oneDNN's int8 kernels on the CPU engine) with one requantization.
//  - The bias is re-expressed in the accumulator's units, round(b / (sx * sw[c])), as
//    QLinearConv defines it; a bias already written as DQ(int32, sx * sw) keeps its integers.
//  - A Relu or Clip (ReLU6) between the Conv and the Q folds when Q saturates its bounds
//    anyway: Q is monotonic, so Q(clamp(v, lo, hi)) = clamp(Q(v), Q(lo), Q(hi)), which is
//    Q(v) when Q(lo) and Q(hi) are the type's ends (for Relu: zy is the lowest value).
//  - Not exact: QLinearConv requantizes acc * (sx * sw / sy) where the original divides the
//    float sum by sy, so a value within float rounding of a rounding tie may land one
//    quantum apart (ONNX Runtime's own QDQ fusion has the same property). The warm-up check
//    compares within the quantization's tolerance (docs/compiler.md).
// Likewise DQ(aq) -> MatMul(., DQ(bq, sb, 0)) [-> Relu | Clip] -> Q becomes QLinearMatMul for
// constant int8 weights [K, N] with one scale or one per column (no bias: QLinearMatMul has
// none; a MatMul followed by its bias Add stays float).
// And DQ(xq, s, z) -> MaxPool -> Q(s, z) becomes MaxPool(xq) (exact: Q(DQ(q)) = q, and max
// commutes with the monotonic dequantization).
// Preconditions: scales, zero points, weights and bias are constants; dtypes inferred.
// Leaves alone: per-axis activation scales, non-zero weight zero points, uint8 weights (no
// integer kernel takes them), non-float32 scales, a Conv output read by anything but the Q.
#pragma once

#include "compiler/passes/pass.h"

namespace kiln::passes {

absl::StatusOr<bool> FuseQdq(Graph& graph);

class FuseQdqPass : public Pass {
 public:
  std::string name() const override { return "fuse_qdq"; }

 protected:
  absl::StatusOr<bool> RunImpl(Graph& graph) override { return FuseQdq(graph); }
};

}  // namespace kiln::passes

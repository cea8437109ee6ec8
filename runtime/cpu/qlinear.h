// Internal to runtime/cpu: what QLinearConv (dnnl_qconv.cc) and QLinearMatMul
// (dnnl_qmatmul.cc) share. Both have the same inputs (x, x_scale, x_zero_point, w, w_scale,
// w_zero_point, y_scale, y_zero_point) and the same requantization,
//   y = saturate(round_half_even(acc * (x_scale * w_scale[c] / y_scale)) + y_zero),
// with the multiplier rounded to float32 at each step as the reference computes it. oneDNN's
// int8 primitives round acc * multiplier to float32 before rounding to an integer (one
// quantum off the reference's double product near a tie); the float32 path below multiplies
// in double and matches the reference exactly.
//
// oneDNN's int8 kernels are exact only with a 32-bit dot product (VNNI). Without it they
// pair u8 x s8 products into a saturating 16-bit sum (vpmaddubsw), exact only while
// 255 * (|w_a| + |w_b|) <= 32767, and they halve the weights of an int8 source. There the
// same integers go through oneDNN's float32 primitive instead (QLinearFloatKernel): every
// product and partial sum is an integer, exact in float32 while each output channel's
// sum |w| * max|x - x_zero| + |bias| stays within 2^24; past that the node runs on the
// reference kernel.
#pragma once

#include <optional>
#include <vector>

#include "runtime/cpu/build_context.h"

namespace kiln::cpu {

const Tensor* ConstInput(const Node& node, size_t i);
// u8/s8 for uint8/int8, nullopt otherwise.
std::optional<dnnl::memory::data_type> ByteType(DType t);

// The constant quantization parameters.
struct QParams {
  float x_scale = 1.f, y_scale = 1.f;
  int32_t x_zero = 0, y_zero = 0;
  std::vector<float> w_scale;  // one, or one per output channel
};

// nullopt when a scale is not a float32 constant, x_scale/y_scale/zero points are not
// scalars, w_scale is neither one value nor `out_channels`, or a weight zero point is not 0
// (oneDNN's int8 primitives take none).
std::optional<QParams> ReadQParams(const Node& node, int64_t out_channels);
// x_scale * w_scale[c] / y_scale, in float32 steps.
std::vector<float> OutputScales(const QParams& p);
// The attributes of an int8 primitive: a user scratchpad, the output scales (one, or per
// output channel: mask bit 1) and the source's and destination's zero points.
dnnl::primitive_attr Int8Attr(const QParams& p);

// Whether oneDNN's int8 result is exact for int8 weights `w` and a source of `x_type` on
// this CPU (see above).
bool Int8ExactOnThisCpu(const Tensor& w, DType x_type);
// Whether float32 accumulation is exact: `abs_sums[c]` = sum |w| of output channel c.
bool FloatAccumulationExact(const std::vector<double>& abs_sums, const Tensor* bias,
                            DType x_type, int32_t x_zero);
Tensor ToFloat(const Tensor& t);

// The float32 path: shift x to float (x - x_zero) into `xf`, run `product` (a float32
// primitive writing `acc`, output channels innermost), requantize `acc` into `y`.
class QLinearFloatKernel : public CpuKernel {
 public:
  absl::Status Run(const ExecContext& ctx) override;
  void SetQuantization(DType x, DType y, const QParams& p, int64_t channels, int64_t in_elems,
                       int64_t out_elems);
  // Reads slot `xs` as `x_md`, writes `ys` as `y_md`, and binds `product`'s src (`src`, the
  // shifted float copy) and dst (`dst`, the float accumulator) to temps of the step.
  void Bind(BuildContext& ctx, int xs, const dnnl::memory::desc& x_md, int ys,
            const dnnl::memory::desc& y_md, const dnnl::memory::desc& src,
            const dnnl::memory::desc& dst, const dnnl::memory::desc& scratch);

  DnnlCall product;
  int x_slot = -1, xf_slot = -1, acc_slot = -1, y_slot = -1;

 private:
  DType x_type_ = DType::kUInt8, y_type_ = DType::kUInt8;
  int32_t x_zero_ = 0, y_zero_ = 0;
  std::vector<double> multiplier_;  // per output channel, float32 values
  int64_t in_elems_ = 0, out_elems_ = 0;
};

}  // namespace kiln::cpu

// Private to the neural-network kernels (ops_nn.cc, ops_conv.cc, ops_pool.cc, ...): the
// per-file registration functions RegisterNnKernels calls, and the helpers they share.
//
// Every NN kernel converts its float inputs to a double buffer once (typed loops over raw
// pointers, never per-element dispatch), computes in double, and rounds once into the output
// dtype. That keeps one code path per operator for float16/bfloat16/float32/float64 while the
// hot loops (conv, matmul) run over plain double arrays.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "ir/graph.h"
#include "ops/kernel.h"

namespace kiln::ref::nn {

void RegisterConvKernels(KernelRegistry& r);       // Conv, ConvTranspose
void RegisterPoolKernels(KernelRegistry& r);       // Average/Max/Lp pools, global pools
void RegisterNormKernels(KernelRegistry& r);       // Batch/Instance/Group norms (+ axis norms)
void RegisterAxisNormKernels(KernelRegistry& r);   // Layer/RMS/Lp/MVN norms, LRN
void RegisterMatMulKernels(KernelRegistry& r);     // Gemm, MatMul
void RegisterSoftmaxKernels(KernelRegistry& r);    // Softmax, LogSoftmax, Hardmax
void RegisterEinsumKernels(KernelRegistry& r);     // Einsum
void RegisterAttentionKernels(KernelRegistry& r);  // Attention
void RegisterRotaryKernels(KernelRegistry& r);     // RotaryEmbedding
void RegisterLinalgKernels(KernelRegistry& r);     // Det
void RegisterUnpoolKernels(KernelRegistry& r);     // MaxUnpool, Col2Im
void RegisterGridKernels(KernelRegistry& r);       // GridSample, AffineGrid
void RegisterDetectionKernels(KernelRegistry& r);  // NonMaxSuppression, RoiAlign
void RegisterRecurrentKernels(KernelRegistry& r);  // RNN, GRU, LSTM
void RegisterLossKernels(KernelRegistry& r);       // NLL and softmax cross-entropy losses
void RegisterSignalKernels(KernelRegistry& r);     // DFT, STFT, windows, MelWeightMatrix

// Upper bound on the elements one NN kernel will allocate: hostile attributes (huge strides
// in ConvTranspose, huge pads) must give an error, not a bad_alloc.
inline constexpr int64_t kMaxElements = int64_t{1} << 31;

// Product of dims with overflow and kMaxElements checks.
absl::StatusOr<int64_t> CheckedNumel(const Node& node, const std::vector<int64_t>& shape);

// Fails with UNIMPLEMENTED unless t is float16, bfloat16, float32 or float64.
absl::Status CheckFloat(const Node& node, const Tensor& t);
// float types plus every integer type (MatMul, MaxPool...).
absl::Status CheckNumeric(const Node& node, const Tensor& t);

// The tensor's elements as doubles (any numeric dtype; the caller checked it).
std::vector<double> ToDoubles(const Tensor& t);
// A tensor of `dtype` holding v rounded once (integers: truncated toward zero, saturated).
Tensor FromDoubles(DType dtype, std::vector<int64_t> shape, const std::vector<double>& v);

// Input i as doubles after checking it is present and a float type of the same dtype as
// `like` (when given).
absl::StatusOr<std::vector<double>> FloatInput(const Node& node, const KernelInputs& in, size_t i,
                                               const Tensor* like = nullptr);

// Numeric operand t broadcast unidirectionally (numpy rules, t's dims 1 or equal) to `shape`
// and materialized; INVALID_ARGUMENT when it does not broadcast.
absl::StatusOr<std::vector<double>> BroadcastTo(const Node& node, const Tensor& t,
                                                const std::vector<int64_t>& shape);

// Splits a shape around `axis`: outer = prod(dims[:axis]), len = dims[axis],
// inner = prod(dims[axis+1:]).
struct AxisSplit {
  int64_t outer = 1, len = 1, inner = 1;
};
AxisSplit SplitAtAxis(const std::vector<int64_t>& shape, int64_t axis);

}  // namespace kiln::ref::nn

// Internal to runtime/cuda (includes cudnn.h): which cuDNN convolution algorithm and math
// type a build uses. Pure functions over cuDNN's own types, unit-tested without a GPU
// (cuda_engine_test) on the Find results cuDNN documents.
#pragma once

#include <cudnn.h>

#include <cstddef>

namespace kiln::cuda {

// The math type a build asks cuDNN for. fp32: CUDNN_FMA_MATH (no tensor cores). TF32:
// CUDNN_DEFAULT_MATH, which lets fp32 convolutions use TF32 tensor cores, as PyTorch does;
// CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION would also allow down-conversion to FP16.
cudnnMathType_t RequestedMathType(bool tf32);

// Whether an algorithm keeps a NaN or infinity where the reference has it. FFT and Winograd
// algorithms transform whole tiles, so one non-finite input spreads over every output of its
// tile (and the warm-up check's non-finite feed fails): they are never chosen.
bool KeepsNonFiniteLocal(cudnnConvolutionFwdAlgo_t algo);

// The index in cudnnFindConvolutionForwardAlgorithmEx's results (fastest first) of the
// algorithm to use: the first at or after `start` that succeeded, fits `workspace_limit`,
// keeps non-finite values local and, unless `tf32`, runs with FMA math; -1 when none does.
// The caller sets the convolution's math type to that result's mathType (what Find timed),
// and asks again from the next index when the call refuses it.
int PickAlgorithm(const cudnnConvolutionFwdAlgoPerf_t* perf, int count, bool tf32, size_t workspace_limit,
                  int start = 0);

}  // namespace kiln::cuda

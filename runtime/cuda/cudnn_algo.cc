#include "runtime/cuda/cudnn_algo.h"

namespace kiln::cuda {

cudnnMathType_t RequestedMathType(bool tf32) { return tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH; }

bool KeepsNonFiniteLocal(cudnnConvolutionFwdAlgo_t algo) {
  switch (algo) {
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT:
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING:
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD:
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED:
      return false;
    default:
      return algo >= 0 && algo < CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
  }
}

int PickAlgorithm(const cudnnConvolutionFwdAlgoPerf_t* perf, int count, bool tf32, size_t workspace_limit,
                  int start) {
  for (int i = start < 0 ? 0 : start; i < count; ++i) {
    const cudnnConvolutionFwdAlgoPerf_t& p = perf[i];
    if (p.status != CUDNN_STATUS_SUCCESS || p.memory > workspace_limit) continue;
    if (!KeepsNonFiniteLocal(p.algo)) continue;
    if (!tf32 && p.mathType != CUDNN_FMA_MATH) continue;
    return i;
  }
  return -1;
}

}  // namespace kiln::cuda

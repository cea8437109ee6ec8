// Convolutions on cuDNN's legacy API: cudnnConvolutionBiasActivationForward when the plan
// fuses ReLU (with the bias, and the first residual as z), else cudnnConvolutionForward.
// Math is FMA-only (strict fp32) unless the engine was asked for TF32. The algorithm is the
// fastest that cudnnFindConvolutionForwardAlgorithmEx measures at build and cudnn_algo.h
// accepts (or the one an earlier build of the same engine chose, from the engine cache).
#include <algorithm>
#include <climits>
#include <vector>

#include "runtime/cuda/cuda_libs.h"
#include "runtime/cuda/cudnn_algo.h"
#include "runtime/cuda/cuda_status.h"
#include "runtime/cuda/steps.h"

namespace kiln::cuda {
namespace {

absl::StatusOr<std::vector<int>> Ints(const std::vector<int64_t>& v) {
  std::vector<int> out;
  for (int64_t x : v) {
    if (x < INT_MIN || x > INT_MAX) return absl::UnimplementedError("a dimension beyond cuDNN's int range");
    out.push_back(static_cast<int>(x));
  }
  return out;
}

// Owns the descriptors of one convolution.
struct Descriptors {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, bias = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnActivationDescriptor_t act = nullptr;
  ~Descriptors() {
    if (x) Dnn().cudnnDestroyTensorDescriptor(x);
    if (y) Dnn().cudnnDestroyTensorDescriptor(y);
    if (bias) Dnn().cudnnDestroyTensorDescriptor(bias);
    if (w) Dnn().cudnnDestroyFilterDescriptor(w);
    if (conv) Dnn().cudnnDestroyConvolutionDescriptor(conv);
    if (act) Dnn().cudnnDestroyActivationDescriptor(act);
  }
};

absl::Status SetTensor(cudnnTensorDescriptor_t* d, const std::vector<int64_t>& dims) {
  KILN_CUDNN(Dnn().cudnnCreateTensorDescriptor(d));
  ASSIGN_OR_RETURN(std::vector<int> v, Ints(dims));
  KILN_CUDNN(Dnn().cudnnSetTensorNdDescriptorEx(*d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, static_cast<int>(v.size()), v.data()));
  return absl::OkStatus();
}

absl::Status Describe(const ConvPlan& p, bool tf32, Descriptors& d) {
  RETURN_IF_ERROR(SetTensor(&d.x, p.x_dims));
  RETURN_IF_ERROR(SetTensor(&d.y, p.y_dims));
  std::vector<int64_t> bias_dims(p.y_dims.size(), 1);
  bias_dims[1] = p.y_dims[1];
  RETURN_IF_ERROR(SetTensor(&d.bias, bias_dims));
  KILN_CUDNN(Dnn().cudnnCreateFilterDescriptor(&d.w));
  ASSIGN_OR_RETURN(std::vector<int> w, Ints(p.w_dims));
  KILN_CUDNN(Dnn().cudnnSetFilterNdDescriptor(d.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, static_cast<int>(w.size()), w.data()));
  KILN_CUDNN(Dnn().cudnnCreateConvolutionDescriptor(&d.conv));
  ASSIGN_OR_RETURN(std::vector<int> pads, Ints(p.pads));
  ASSIGN_OR_RETURN(std::vector<int> strides, Ints(p.strides));
  ASSIGN_OR_RETURN(std::vector<int> dil, Ints(p.dilations));
  KILN_CUDNN(Dnn().cudnnSetConvolutionNdDescriptor(d.conv, static_cast<int>(pads.size()), pads.data(), strides.data(),
                                             dil.data(), CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  KILN_CUDNN(Dnn().cudnnSetConvolutionGroupCount(d.conv, static_cast<int>(p.groups)));
  // FMA-only kernels unless TF32 was asked for: cuDNN's default math lets fp32 convolutions
  // run on TF32 tensor cores, which moves results by ~1e-3 (cudnn_algo.h).
  KILN_CUDNN(Dnn().cudnnSetConvolutionMathType(d.conv, RequestedMathType(tf32)));
  KILN_CUDNN(Dnn().cudnnCreateActivationDescriptor(&d.act));
  // ONNX's Relu keeps NaN.
  KILN_CUDNN(Dnn().cudnnSetActivationDescriptor(d.act, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0));
  return absl::OkStatus();
}

class ConvStep : public Step {
 public:
  absl::Status Enqueue(cudaStream_t) override {
    const float one = 1.f, zero = 0.f, z_scale = z_ ? 1.f : 0.f;
    if (fused_) {
      // With alpha2 = 0 cuDNN does not read z, which may then be y itself.
      KILN_CUDNN(Dnn().cudnnConvolutionBiasActivationForward(
          h_, &one, d_.x, x_, d_.w, w_, d_.conv, algo_, *workspace_, workspace_bytes_, &z_scale, d_.y,
          z_ ? z_ : y_, d_.bias, bias_, d_.act, d_.y, y_));
      return absl::OkStatus();
    }
    KILN_CUDNN(Dnn().cudnnConvolutionForward(h_, &one, d_.x, x_, d_.w, w_, d_.conv, algo_, *workspace_,
                                       workspace_bytes_, &zero, d_.y, y_));
    return absl::OkStatus();
  }

  cudnnHandle_t h_ = nullptr;
  Descriptors d_;
  cudnnConvolutionFwdAlgo_t algo_ = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  const void *x_ = nullptr, *w_ = nullptr, *z_ = nullptr, *bias_ = nullptr;
  void* y_ = nullptr;
  void* const* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  bool fused_ = false;
};

// Sets `algo` (with `math`) on the step and sizes its workspace; whether cuDNN takes it for
// this call. The fused call is tried once here, on the build's scratch: Find timed the plain
// convolution, and cudnnConvolutionBiasActivationForward may answer NOT_SUPPORTED for an
// algorithm the plain call takes. Any other error is the build's.
absl::StatusOr<bool> Try(BuildContext& ctx, ConvStep& s, cudnnConvolutionFwdAlgo_t algo, cudnnMathType_t math) {
  if (!KeepsNonFiniteLocal(algo)) return false;
  KILN_CUDNN(Dnn().cudnnSetConvolutionMathType(s.d_.conv, math));
  s.algo_ = algo;
  if (Dnn().cudnnGetConvolutionForwardWorkspaceSize(ctx.cudnn, s.d_.x, s.d_.w, s.d_.conv, s.d_.y, algo,
                                                    &s.workspace_bytes_) != CUDNN_STATUS_SUCCESS ||
      s.workspace_bytes_ > ctx.find_workspace_bytes) {
    return false;
  }
  if (!s.fused_) return true;
  void* const scratch = ctx.find_workspace;
  void* const* kept = s.workspace_;
  s.workspace_ = &scratch;
  const absl::Status st = s.Enqueue(nullptr);
  s.workspace_ = kept;
  if (absl::IsUnimplemented(st)) return false;  // CUDNN_STATUS_NOT_SUPPORTED
  RETURN_IF_ERROR(st);
  return true;
}

// The fastest algorithm cuDNN measures that cudnn_algo.h accepts and the call takes, with
// the math type Find timed it with.
absl::Status Measure(BuildContext& ctx, ConvStep& s) {
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int returned = 0;
  KILN_CUDNN(Dnn().cudnnFindConvolutionForwardAlgorithmEx(ctx.cudnn, s.d_.x, s.x_, s.d_.w, s.w_, s.d_.conv, s.d_.y, s.y_,
                                                     CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf,
                                                     ctx.find_workspace, ctx.find_workspace_bytes));
  for (int i = PickAlgorithm(perf, returned, ctx.tf32, ctx.find_workspace_bytes); i >= 0;
       i = PickAlgorithm(perf, returned, ctx.tf32, ctx.find_workspace_bytes, i + 1)) {
    ASSIGN_OR_RETURN(const bool taken, Try(ctx, s, perf[i].algo, perf[i].mathType));
    if (taken) return absl::OkStatus();
  }
  return absl::UnimplementedError(std::string("cuDNN has no algorithm for this ") +
                                  (s.fused_ ? "fused convolution" : "convolution"));
}

// The algorithm an earlier build chose (the engine cache), if this build takes it, else the
// fastest measured. The chosen list keeps one entry per convolution (-1: none) so that the
// next build's indices still match.
absl::Status ChooseAlgorithm(BuildContext& ctx, ConvStep& s) {
  const size_t i = ctx.chosen_algos.size();
  bool taken = false;
  if (i < ctx.given_algos.size() && ctx.given_algos[i] >= 0 && ctx.given_algos[i] < CUDNN_CONVOLUTION_FWD_ALGO_COUNT) {
    ASSIGN_OR_RETURN(taken, Try(ctx, s, static_cast<cudnnConvolutionFwdAlgo_t>(ctx.given_algos[i]),
                                RequestedMathType(ctx.tf32)));
  }
  if (!taken) {
    const absl::Status st = Measure(ctx, s);
    if (!st.ok()) {
      ctx.chosen_algos.push_back(-1);
      return st;
    }
  }
  ctx.workspace_bytes = std::max(ctx.workspace_bytes, s.workspace_bytes_);
  ctx.chosen_algos.push_back(static_cast<int>(s.algo_));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Step>> MakeConvStep(BuildContext& ctx, const Node& node, const ConvPlan& plan) {
  auto s = std::make_unique<ConvStep>();
  s->h_ = ctx.cudnn;
  s->fused_ = plan.fused;
  RETURN_IF_ERROR(Describe(plan, ctx.tf32, s->d_));
  ASSIGN_OR_RETURN(void* x, ctx.Ptr(node.input(0)));
  ASSIGN_OR_RETURN(void* w, ctx.Ptr(node.input(1)));
  ASSIGN_OR_RETURN(s->y_, ctx.Ptr(node.output(0)));
  s->x_ = x;
  s->w_ = w;
  if (plan.fused) {
    if (plan.bias_input >= 0) {
      ASSIGN_OR_RETURN(void* b, ctx.Ptr(node.input(plan.bias_input)));
      s->bias_ = b;
    } else {
      if (ctx.zeros_bytes < static_cast<size_t>(plan.y_dims[1]) * sizeof(float)) {
        return absl::InternalError("zero bias buffer too small");
      }
      s->bias_ = ctx.zeros;
    }
    if (plan.z_input >= 0) {
      ASSIGN_OR_RETURN(void* z, ctx.Ptr(node.input(plan.z_input)));
      s->z_ = z;
    }
  }
  s->workspace_ = &ctx.workspace;
  RETURN_IF_ERROR(ChooseAlgorithm(ctx, *s));
  return std::unique_ptr<Step>(std::move(s));
}

}  // namespace kiln::cuda

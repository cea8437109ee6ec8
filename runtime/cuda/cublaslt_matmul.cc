// Matrix products on cuBLASLt: the plan's column-major problem (matmul_plan.h), fp32 compute
// (CUBLAS_COMPUTE_32F; CUBLAS_COMPUTE_32F_FAST_TF32 only when the engine asks for TF32),
// strided batches, the bias / ReLU / GELU epilogues, and the first algorithm cuBLASLt's
// heuristic offers within the workspace limit.
#include <algorithm>

#include "runtime/cuda/cuda_libs.h"
#include "runtime/cuda/cuda_status.h"
#include "runtime/cuda/steps.h"

namespace kiln::cuda {
namespace {

// The most workspace a product may ask for (cuBLASLt's recommendation for Hopper is 32 MiB).
constexpr size_t kMaxWorkspace = size_t{32} << 20;

struct LtObjects {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtObjects() {
    if (op) Lt().cublasLtMatmulDescDestroy(op);
    if (a) Lt().cublasLtMatrixLayoutDestroy(a);
    if (b) Lt().cublasLtMatrixLayoutDestroy(b);
    if (c) Lt().cublasLtMatrixLayoutDestroy(c);
    if (d) Lt().cublasLtMatrixLayoutDestroy(d);
    if (pref) Lt().cublasLtMatmulPreferenceDestroy(pref);
  }
};

absl::Status Layout(cublasLtMatrixLayout_t* l, const LtMatrix& m, int64_t batch) {
  KILN_CUBLAS(Lt().cublasLtMatrixLayoutCreate(l, CUDA_R_32F, static_cast<uint64_t>(m.rows), static_cast<uint64_t>(m.cols), m.ld));
  if (batch > 1) {
    const int32_t count = static_cast<int32_t>(batch);
    KILN_CUBLAS(Lt().cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
    KILN_CUBLAS(Lt().cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &m.batch_stride,
                                                 sizeof m.batch_stride));
  }
  return absl::OkStatus();
}

cublasLtEpilogue_t EpilogueOf(MatmulPlan::Epilogue e) {
  switch (e) {
    case MatmulPlan::Epilogue::kBias: return CUBLASLT_EPILOGUE_BIAS;
    case MatmulPlan::Epilogue::kRelu: return CUBLASLT_EPILOGUE_RELU;
    case MatmulPlan::Epilogue::kReluBias: return CUBLASLT_EPILOGUE_RELU_BIAS;
    case MatmulPlan::Epilogue::kGelu: return CUBLASLT_EPILOGUE_GELU;
    case MatmulPlan::Epilogue::kGeluBias: return CUBLASLT_EPILOGUE_GELU_BIAS;
    default: return CUBLASLT_EPILOGUE_DEFAULT;
  }
}

// The alignment of each operand's pointer (and batch stride) as cuBLASLt's heuristic must
// know it: without it, it may pick a kernel that assumes 256 bytes (matmul_plan.h).
absl::Status StateAlignment(const MatmulPlan& p, const void* a, const void* b, const void* c, const void* d,
                            cublasLtMatmulPreference_t pref) {
  const struct {
    cublasLtMatmulPreferenceAttributes_t attr;
    const void* ptr;
    int64_t stride;
  } operands[] = {{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, a, p.lt_a.batch_stride},
                  {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, b, p.lt_b.batch_stride},
                  {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, c, p.lt_d.batch_stride},
                  {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, d, p.lt_d.batch_stride}};
  for (const auto& o : operands) {
    const uint32_t align = LtAlignment(reinterpret_cast<uintptr_t>(o.ptr), o.stride, p.batch);
    KILN_CUBLAS(Lt().cublasLtMatmulPreferenceSetAttribute(pref, o.attr, &align, sizeof align));
  }
  return absl::OkStatus();
}

absl::Status Describe(const MatmulPlan& p, bool tf32, const void* bias, LtObjects& o) {
  KILN_CUBLAS(Lt().cublasLtMatmulDescCreate(&o.op, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = p.lt_a.transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = p.lt_b.transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
  KILN_CUBLAS(Lt().cublasLtMatmulDescSetAttribute(o.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  KILN_CUBLAS(Lt().cublasLtMatmulDescSetAttribute(o.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  const cublasLtEpilogue_t epi = EpilogueOf(p.epilogue);
  KILN_CUBLAS(Lt().cublasLtMatmulDescSetAttribute(o.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  if (bias) {
    KILN_CUBLAS(Lt().cublasLtMatmulDescSetAttribute(o.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    const int64_t shared = 0;  // one bias for every matrix of a batch
    KILN_CUBLAS(Lt().cublasLtMatmulDescSetAttribute(o.op, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &shared, sizeof shared));
  }
  RETURN_IF_ERROR(Layout(&o.a, p.lt_a, p.batch));
  RETURN_IF_ERROR(Layout(&o.b, p.lt_b, p.batch));
  RETURN_IF_ERROR(Layout(&o.c, p.lt_d, p.batch));
  RETURN_IF_ERROR(Layout(&o.d, p.lt_d, p.batch));
  KILN_CUBLAS(Lt().cublasLtMatmulPreferenceCreate(&o.pref));
  KILN_CUBLAS(Lt().cublasLtMatmulPreferenceSetAttribute(o.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &kMaxWorkspace,
                                                   sizeof kMaxWorkspace));
  return absl::OkStatus();
}

class MatmulStep : public Step {
 public:
  absl::Status Enqueue(cudaStream_t stream) override {
    KILN_CUBLAS(Lt().cublasLtMatmul(lt_, o_.op, &alpha_, a_, o_.a, b_, o_.b, &beta_, c_, o_.c, d_, o_.d, &algo_,
                               *workspace_, workspace_bytes_, stream));
    return absl::OkStatus();
  }

  cublasLtHandle_t lt_ = nullptr;
  LtObjects o_;
  cublasLtMatmulAlgo_t algo_{};
  float alpha_ = 1.f, beta_ = 0.f;
  const void *a_ = nullptr, *b_ = nullptr, *c_ = nullptr;
  void* d_ = nullptr;
  void* const* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Step>> MakeMatmulStep(BuildContext& ctx, const Node& node, const MatmulPlan& plan) {
  if (plan.c_input < 0 && plan.beta != 0.f) {
    // C would be D itself, and cuBLASLt would add beta times the previous output.
    return absl::InternalError(node.Describe() + ": a cuBLASLt plan with beta != 0 and no C");
  }
  auto s = std::make_unique<MatmulStep>();
  s->lt_ = ctx.lt;
  s->alpha_ = plan.alpha;
  s->beta_ = plan.beta;
  const void* bias = nullptr;
  if (plan.bias_input >= 0) {
    ASSIGN_OR_RETURN(void* b, ctx.Ptr(node.input(plan.bias_input)));
    bias = b;
  }
  RETURN_IF_ERROR(Describe(plan, ctx.tf32, bias, s->o_));
  // cuBLASLt's A is our B and its B our A (matmul_plan.h).
  ASSIGN_OR_RETURN(void* ours_a, ctx.Ptr(node.input(plan.a_input)));
  ASSIGN_OR_RETURN(void* ours_b, ctx.Ptr(node.input(plan.b_input)));
  ASSIGN_OR_RETURN(s->d_, ctx.Ptr(node.output(0)));
  s->a_ = ours_b;
  s->b_ = ours_a;
  s->c_ = s->d_;  // not read: beta is 0 (checked above)
  if (plan.c_input >= 0) {
    ASSIGN_OR_RETURN(void* c, ctx.Ptr(node.input(plan.c_input)));
    s->c_ = c;
  }
  RETURN_IF_ERROR(StateAlignment(plan, s->a_, s->b_, s->c_, s->d_, s->o_.pref));
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  KILN_CUBLAS(Lt().cublasLtMatmulAlgoGetHeuristic(ctx.lt, s->o_.op, s->o_.a, s->o_.b, s->o_.c, s->o_.d, s->o_.pref, 1,
                                             &result, &returned));
  if (returned == 0) return absl::UnimplementedError("cuBLASLt has no algorithm for " + node.Describe());
  s->algo_ = result.algo;
  s->workspace_bytes_ = result.workspaceSize;
  ctx.workspace_bytes = std::max(ctx.workspace_bytes, s->workspace_bytes_);
  s->workspace_ = &ctx.workspace;
  return std::unique_ptr<Step>(std::move(s));
}

}  // namespace kiln::cuda

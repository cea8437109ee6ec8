#include "runtime/cuda/matmul_plan.h"

#include "ir/kiln_ops.h"
#include "runtime/cuda/operand_dims.h"

namespace kiln::cuda {
namespace {

int64_t Product(const std::vector<int64_t>& v, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end; ++i) p *= v[i];
  return p;
}

// The batch stride of an operand with `dims` (its last two are the matrix) in a product whose
// batch dims are `batch`: its full matrix count, or 0 when every batch dim broadcasts.
absl::StatusOr<int64_t> BatchStride(const std::vector<int64_t>& dims, const std::vector<int64_t>& batch,
                                    const Node& node) {
  const size_t own = dims.size() - 2;
  const int64_t matrix = dims[own] * dims[own + 1];
  if (Product(dims, 0, own) == 1) return 0;
  // Right-aligned, every batch dim must match the product's (no partial broadcast).
  if (own != batch.size()) {
    std::vector<int64_t> lead(batch.begin(), batch.end() - own);
    if (Product(lead, 0, lead.size()) != 1) return absl::UnimplementedError(node.Describe() + ": partial batch broadcast");
  }
  for (size_t i = 0; i < own; ++i) {
    if (dims[i] != batch[batch.size() - own + i]) return absl::UnimplementedError(node.Describe() + ": partial batch broadcast");
  }
  return matrix;
}

absl::Status Geometry(const Node& node, MatmulPlan& p) {
  ASSIGN_OR_RETURN(std::vector<int64_t> a, StaticFloatDims(node.input(0), node));
  ASSIGN_OR_RETURN(std::vector<int64_t> b, StaticFloatDims(node.input(1), node));
  ASSIGN_OR_RETURN(std::vector<int64_t> y, StaticFloatDims(node.output(0), node));
  const bool gemm = node.op_type == "Gemm";
  const bool ta = node.GetInt("transA", 0) != 0, tb = node.GetInt("transB", 0) != 0;
  if (gemm && (a.size() != 2 || b.size() != 2)) {
    return absl::InvalidArgumentError(node.Describe() + ": Gemm operands must be 2-D");
  }
  // FusedMatMul's transA/transB swap an operand's last two dims: any rank >= 2.
  if ((ta && a.size() < 2) || (tb && b.size() < 2)) {
    return absl::InvalidArgumentError(node.Describe() + ": a transposed operand needs rank >= 2");
  }
  if (a.empty() || b.empty()) return absl::InvalidArgumentError(node.Describe() + ": scalar operand");
  // numpy's 1-D rules: a vector A is a row [1, k], a vector B a column [k, 1].
  if (a.size() == 1) a.insert(a.begin(), 1);
  if (b.size() == 1) b.push_back(1);
  p.m = ta ? a.back() : a[a.size() - 2];
  p.k = ta ? a[a.size() - 2] : a.back();
  p.n = tb ? b[b.size() - 2] : b.back();
  const int64_t kb = tb ? b.back() : b[b.size() - 2];
  if (kb != p.k) return absl::InvalidArgumentError(node.Describe() + ": inner dims differ");
  if (p.m == 0 || p.n == 0 || p.k == 0) return absl::UnimplementedError(node.Describe() + ": an empty product");
  std::vector<int64_t> batch;
  const size_t rank = std::max(a.size(), b.size());
  for (size_t i = 0; i + 2 < rank; ++i) {
    const int64_t da = i + a.size() >= rank ? a[i + a.size() - rank] : 1;
    const int64_t db = i + b.size() >= rank ? b[i + b.size() - rank] : 1;
    batch.push_back(std::max(da, db));
  }
  p.batch = Product(batch, 0, batch.size());
  if (p.batch * p.m * p.n != Product(y, 0, y.size())) {
    return absl::InvalidArgumentError(node.Describe() + ": output size");
  }
  ASSIGN_OR_RETURN(const int64_t sa, BatchStride(a, batch, node));
  ASSIGN_OR_RETURN(const int64_t sb, BatchStride(b, batch, node));
  // cuBLASLt's A is our B: stored row-major k x n is column-major n x k (ld n); transB stores n x k.
  p.lt_a = tb ? LtMatrix{p.k, p.n, p.k, true, sb} : LtMatrix{p.n, p.k, p.n, false, sb};
  p.lt_b = ta ? LtMatrix{p.m, p.k, p.m, true, sa} : LtMatrix{p.k, p.m, p.k, false, sa};
  p.lt_d = LtMatrix{p.n, p.m, p.n, false, p.batch > 1 ? p.m * p.n : 0};
  return absl::OkStatus();
}

// Gemm's C (or FusedMatMul's): as the bias epilogue, as cuBLASLt's C, or in the tail kernel.
void PlaceC(const Node& node, MatmulPlan& p) {
  const Value* c = node.input(2);
  if (!c || !c->shape || !IsStatic(*c->shape)) return;
  const std::vector<int64_t> cd = StaticDims(*c->shape);
  const std::vector<int64_t> yd = StaticDims(*node.output(0)->shape);
  const int64_t numel = NumElements(cd);
  const bool row = numel == p.n && (cd.size() == 1 || (cd.size() == 2 && cd[0] == 1));
  if (row && p.beta == 1.f) {
    p.bias_input = 2;
    p.epilogue = MatmulPlan::Epilogue::kBias;
    // The bias epilogue replaces beta * C: cuBLASLt adds beta * C whenever beta is not 0, and
    // with no C of our own, C is D, so beta 1 would add the stale output to every result.
    p.beta = 0.f;
  } else if (cd == yd && p.batch == 1) {
    p.c_input = 2;
  } else {
    p.tail.bias_input = 2;
    p.tail.bias_shape = cd;
    p.tail.bias_scale = p.beta;
    p.beta = 0.f;
  }
}

// The leading epilogue step cuBLASLt applies (Relu; GeluTanh, cuBLASLt's GELU), if any.
size_t FuseActivation(const std::vector<kiln_ops::EpilogueStep>& steps, MatmulPlan& p) {
  using E = MatmulPlan::Epilogue;
  if (steps.empty() || p.tail.bias_input >= 0) return 0;
  const bool bias = p.epilogue == E::kBias;
  if (steps[0].op == "Relu") p.epilogue = bias ? E::kReluBias : E::kRelu;
  if (steps[0].op == "GeluTanh") p.epilogue = bias ? E::kGeluBias : E::kGelu;
  return p.epilogue == E::kDefault || p.epilogue == E::kBias ? 0 : 1;
}

}  // namespace

uint32_t LtAlignment(uintptr_t address, int64_t batch_stride_elements, int64_t batch) {
  uint32_t align = kLtMaxAlignment;
  while (align > 4 && (address % align != 0 ||
                       (batch > 1 && (static_cast<uint64_t>(batch_stride_elements) * 4) % align != 0))) {
    align /= 2;
  }
  return align;
}

absl::StatusOr<MatmulPlan> PlanMatmul(const Node& node, const MatmulPlanOptions& options) {
  const bool fused = node.domain == kKilnDomain && node.op_type == kiln_ops::kFusedMatMul;
  if (!fused && !(node.domain.empty() && (node.op_type == "MatMul" || node.op_type == "Gemm"))) {
    return absl::InvalidArgumentError(node.Describe() + " is not a matrix product");
  }
  MatmulPlan p;
  RETURN_IF_ERROR(Geometry(node, p));
  p.alpha = node.GetFloat("alpha", 1.f);
  p.beta = node.input(2) ? node.GetFloat("beta", 1.f) : 0.f;
  p.tail.out_shape = StaticDims(*node.output(0)->shape);
  if (node.input(2) && node.input(2)->dtype != DType::kFloat32) {
    return absl::UnimplementedError(node.Describe() + ": C is not float32");
  }
  PlaceC(node, p);
  const std::vector<kiln_ops::EpilogueStep> steps = fused ? kiln_ops::ReadEpilogue(node)
                                                          : std::vector<kiln_ops::EpilogueStep>{};
  const size_t taken = options.fuse_activation ? FuseActivation(steps, p) : 0;
  int next_residual = 3;
  for (size_t s = taken; s < steps.size(); ++s) {
    p.tail.steps.push_back(steps[s]);
    if (steps[s].op != "Add") continue;
    const Value* r = node.input(next_residual);
    if (!r || !r->shape || !IsStatic(*r->shape)) return absl::InvalidArgumentError(node.Describe() + ": residual");
    p.tail.residual_inputs.push_back(next_residual++);
    p.tail.residual_shapes.push_back(StaticDims(*r->shape));
  }
  p.has_epilogue = p.tail.bias_input >= 0 || !p.tail.steps.empty();
  return p;
}

}  // namespace kiln::cuda

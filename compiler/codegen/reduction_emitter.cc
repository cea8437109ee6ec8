#include "compiler/codegen/reduction_emitter.h"

#include <limits>
#include <map>

#include "compiler/codegen/index_space.h"
#include "compiler/codegen/shapes.h"

namespace kiln::codegen {
namespace {

using Kind = KernelParam::Kind;

const std::string kInf = FloatLiteral(std::numeric_limits<float>::infinity());

// Rows of `len` elements `inner` apart, as Softmax and LayerNormalization walk them.
struct Rows {
  int64_t outer = 1, len = 1, inner = 1;
  int64_t count() const { return outer * inner; }
};

Rows SplitAt(const std::vector<int64_t>& shape, int64_t axis, bool to_end) {
  Rows r;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    int64_t& part = d < axis ? r.outer : (d == axis || to_end ? r.len : r.inner);
    part *= shape[d];
  }
  return r;
}

// The row loop shared by the per-row kernels: opens the kernel, the shared scratch and the
// loop, and declares `base` (the row's first element); the caller writes the body and closes
// two levels.
void OpenRowLoop(SourceWriter& w, Kernel& k, const std::vector<std::string>& types, const Rows& r) {
  w.Open(KernelSignature(k, types));
  w.Line("__shared__ float smem[" + std::to_string(k.block) + "];");
  w.Open("for (long long row = blockIdx.x; row < " + IntLiteral(r.count()) + "; row += gridDim.x)");
  w.Line("const long long base = (row / " + IntLiteral(r.inner) + ") * " + IntLiteral(r.len * r.inner) +
         " + row % " + IntLiteral(r.inner) + ";");
}

std::string RowLoop(const Rows& r) {
  return "for (long long j = threadIdx.x; j < " + IntLiteral(r.len) + "; j += blockDim.x)";
}

Kernel RowKernel(const std::string& name, const Rows& r, std::vector<KernelParam> params) {
  Kernel k;
  k.name = name;
  k.params = std::move(params);
  k.block = ReductionBlock(r.len);
  k.grid = std::min<int64_t>(std::max<int64_t>(r.count(), 1), 65535);
  k.uses_barrier = true;
  return k;
}

absl::StatusOr<std::vector<Kernel>> Softmax(const Node& node, const std::string& name) {
  ASSIGN_OR_RETURN(std::vector<int64_t> shape, StaticShapeOf(node.input(0)));
  if (node.input(0)->dtype != DType::kFloat32) return absl::UnimplementedError("Softmax dtype");
  int64_t axis = 0;
  if (!shape.empty()) {
    ASSIGN_OR_RETURN(axis, NormalizedAxis(node, node.GetInt("axis", -1), static_cast<int64_t>(shape.size())));
  }
  const Rows r = SplitAt(shape, axis, false);
  Kernel k = RowKernel(name, r, {{Kind::kInput, 0}, {Kind::kOutput, 0}});
  const std::string x = "p0[base + j * " + IntLiteral(r.inner) + "]";
  const std::string y = "p1[base + j * " + IntLiteral(r.inner) + "]";
  SourceWriter w;
  OpenRowLoop(w, k, {"float", "float"}, r);
  // The reference's shift: the largest value, NaN never picked; an all -inf row shifts by 0.
  w.Line("float m = -" + kInf + ";");
  w.Line(RowLoop(r) + " m = kiln_max_num(m, " + x + ");");
  w.Line("m = kiln_block_reduce(m, smem, kiln_op_max_num());");
  w.Line("if (m == -" + kInf + ") m = 0.f;");
  w.Line("float s = 0.f;");
  w.Line(RowLoop(r) + " s += expf(" + x + " - m);");
  w.Line("s = kiln_block_reduce(s, smem, kiln_op_sum());");
  if (node.op_type == "LogSoftmax") {
    w.Line("const float ls = logf(s);");
    w.Line(RowLoop(r) + " " + y + " = " + x + " - m - ls;");
  } else {
    w.Line(RowLoop(r) + " " + y + " = expf(" + x + " - m) / s;");
  }
  w.Close();
  w.Close();
  k.source = w.str();
  return std::vector<Kernel>{std::move(k)};
}

// Scale and bias of LayerNormalization: one value per row element, or one for all.
absl::StatusOr<std::string> PerElement(const Value* v, int64_t len, const std::string& param) {
  ASSIGN_OR_RETURN(std::vector<int64_t> shape, StaticShapeOf(v));
  const int64_t n = NumElements(shape);
  if (v->dtype != DType::kFloat32) return absl::UnimplementedError("LayerNormalization scale dtype");
  if (n == len) return param + "[j]";
  if (n == 1) return param + "[0]";
  return absl::UnimplementedError("LayerNormalization scale " + ShapeToString(shape));
}

absl::StatusOr<std::vector<Kernel>> LayerNorm(const Node& node, const std::string& name) {
  ASSIGN_OR_RETURN(std::vector<int64_t> shape, StaticShapeOf(node.input(0)));
  if (node.input(0)->dtype != DType::kFloat32 || shape.empty() || !node.input(1)) {
    return absl::UnimplementedError(node.Describe() + ": operands");
  }
  ASSIGN_OR_RETURN(int64_t axis, NormalizedAxis(node, node.GetInt("axis", -1), static_cast<int64_t>(shape.size())));
  const Rows r = SplitAt(shape, axis, true);
  std::vector<KernelParam> params = {{Kind::kInput, 0}, {Kind::kInput, 1}};
  if (node.input(2)) params.push_back({Kind::kInput, 2});
  for (int o = 0; o < 3; ++o) {
    if (node.output(o)) params.push_back({Kind::kOutput, o});
  }
  for (int o = 1; o < 3; ++o) {
    if (node.output(o) && node.output(o)->dtype != DType::kFloat32) {
      return absl::UnimplementedError("LayerNormalization stash type");
    }
  }
  auto param = [&](Kind kind, int index) {
    for (size_t i = 0; i < params.size(); ++i) {
      if (params[i] == KernelParam{kind, index}) return "p" + std::to_string(i);
    }
    return std::string();
  };
  ASSIGN_OR_RETURN(std::string scale, PerElement(node.input(1), r.len, param(Kind::kInput, 1)));
  std::string bias = "0.f";
  if (node.input(2)) {
    ASSIGN_OR_RETURN(bias, PerElement(node.input(2), r.len, param(Kind::kInput, 2)));
  }
  Kernel k = RowKernel(name, r, params);
  SourceWriter w;
  OpenRowLoop(w, k, std::vector<std::string>(params.size(), "float"), r);
  w.Line("float s = 0.f;");
  w.Line(RowLoop(r) + " s += p0[base + j];");
  w.Line("const float mean = kiln_block_reduce(s, smem, kiln_op_sum()) / " + std::to_string(r.len) + ".f;");
  w.Line("float q = 0.f;");
  w.Line(RowLoop(r) + " { const float d = p0[base + j] - mean; q += d * d; }");
  w.Line("const float var = kiln_block_reduce(q, smem, kiln_op_sum()) / " + std::to_string(r.len) + ".f;");
  w.Line("const float inv = 1.f / sqrtf(var + " + FloatLiteral(node.GetFloat("epsilon", 1e-5f)) + ");");
  w.Line(RowLoop(r) + " " + param(Kind::kOutput, 0) + "[base + j] = (p0[base + j] - mean) * inv * " +
         scale + " + " + bias + ";");
  if (node.output(1)) w.Line("if (threadIdx.x == 0) " + param(Kind::kOutput, 1) + "[row] = mean;");
  if (node.output(2)) w.Line("if (threadIdx.x == 0) " + param(Kind::kOutput, 2) + "[row] = inv;");
  w.Close();
  w.Close();
  k.source = w.str();
  return std::vector<Kernel>{std::move(k)};
}

// How a reduction maps, combines and finishes (LogSumExp is a two-pass special case).
struct ReduceKind {
  std::string init, map, op, finish;  // map and finish over `x` / `a`; R: the reduced count
};

const std::map<std::string, ReduceKind>& ReduceKinds() {
  static const auto* m = new std::map<std::string, ReduceKind>{
      {"ReduceSum", {"0.f", "x", "kiln_op_sum()", "a"}},
      {"ReduceMean", {"0.f", "x", "kiln_op_sum()", "a / R"}},
      {"ReduceMax", {"-" + kInf, "x", "kiln_op_max()", "a"}},
      {"ReduceMin", {kInf, "x", "kiln_op_min()", "a"}},
      {"ReduceProd", {"1.f", "x", "kiln_op_prod()", "a"}},
      {"ReduceSumSquare", {"0.f", "x * x", "kiln_op_sum()", "a"}},
      {"ReduceL1", {"0.f", "fabsf(x)", "kiln_op_sum()", "a"}},
      {"ReduceL2", {"0.f", "x * x", "kiln_op_sum()", "sqrtf(a)"}},
      {"ReduceLogSum", {"0.f", "x", "kiln_op_sum()", "logf(a)"}},
      {"ReduceLogSumExp", {"0.f", "expf(x - m)", "kiln_op_sum()", "m + logf(a)"}},
      {"GlobalAveragePool", {"0.f", "x", "kiln_op_sum()", "a / R"}},
      {"GlobalMaxPool", {"-" + kInf, "x", "kiln_op_max()", "a"}},
  };
  return *m;
}

// Kept and reduced dims of the input as two index spaces over its strides.
void SplitSpaces(const std::vector<int64_t>& shape, const std::vector<bool>& mask, IndexSpace& kept,
                 IndexSpace& reduced) {
  const std::vector<int64_t> st = RowMajorStrides(shape);
  kept = IndexSpace{{}, {{}}, {0}};
  reduced = IndexSpace{{}, {{}}, {0}};
  for (size_t d = 0; d < shape.size(); ++d) {
    IndexSpace& s = mask[d] ? reduced : kept;
    s.dims.push_back(shape[d]);
    s.strides[0].push_back(st[d]);
  }
  kept = Coalesce(std::move(kept));
  reduced = Coalesce(std::move(reduced));
}

void EmitOffsetInto(SourceWriter& w, const IndexSpace& s, const std::string& index, const std::string& var) {
  const OffsetCode oc = EmitOffsets(s, index);
  for (const std::string& l : oc.lines) w.Line(l);
  w.Line(var + " = " + oc.offsets[0] + ";");
}

absl::StatusOr<std::vector<Kernel>> Reduce(const Node& node, const std::string& name) {
  ASSIGN_OR_RETURN(std::vector<int64_t> shape, StaticShapeOf(node.input(0)));
  if (node.input(0)->dtype != DType::kFloat32) return absl::UnimplementedError(node.op_type + " dtype");
  ASSIGN_OR_RETURN(std::vector<bool> mask, ReducedDims(node, shape.size()));
  const ReduceKind& rk = ReduceKinds().at(node.op_type);
  IndexSpace kept, reduced;
  SplitSpaces(shape, mask, kept, reduced);
  const int64_t outs = Elements(kept), count = Elements(reduced);
  Kernel k = RowKernel(name, Rows{outs, count, 1}, {{Kind::kInput, 0}, {Kind::kOutput, 0}});
  SourceWriter w;
  w.Open(KernelSignature(k, {"float", "float"}));
  w.Line("__shared__ float smem[" + std::to_string(k.block) + "];");
  w.Line("const float R = " + std::to_string(count) + ".f;");
  w.Line("(void)R;");
  w.Open("for (long long o = blockIdx.x; o < " + IntLiteral(outs) + "; o += gridDim.x)");
  w.Line("long long base = 0;");
  w.Open("");
  EmitOffsetInto(w, kept, "o", "base");
  w.Close();
  const std::string loop = "for (long long k = threadIdx.x; k < " + IntLiteral(count) + "; k += blockDim.x)";
  auto body = [&](const std::string& update) {
    w.Open(loop);
    w.Line("long long off = 0;");
    EmitOffsetInto(w, reduced, "k", "off");
    w.Line("const float x = p0[base + off];");
    w.Line(update);
    w.Close();
  };
  w.Line("float m = 0.f;");
  if (node.op_type == "ReduceLogSumExp") {
    // Shift by the (NaN-propagating) max; an infinite or NaN max is the answer itself.
    w.Line("m = -" + kInf + ";");
    body("m = kiln_max(m, x);");
    w.Line("m = kiln_block_reduce(m, smem, kiln_op_max());");
  }
  w.Line("float a = " + rk.init + ";");
  body("a = " + rk.op + "(a, " + rk.map + ");");
  w.Line("a = kiln_block_reduce(a, smem, " + rk.op + ");");
  std::string result = rk.finish;
  if (node.op_type == "ReduceLogSumExp") result = "(m - m != 0.f) ? m : " + rk.finish;
  w.Line("if (threadIdx.x == 0) p1[o] = " + result + ";");
  w.Close();
  w.Close();
  k.source = w.str();
  return std::vector<Kernel>{std::move(k)};
}

}  // namespace

absl::StatusOr<std::vector<bool>> ReducedDims(const Node& node, size_t rank) {
  if (node.op_type == "GlobalAveragePool" || node.op_type == "GlobalMaxPool") {
    std::vector<bool> mask(rank, true);
    for (size_t d = 0; d < rank && d < 2; ++d) mask[d] = false;
    return mask;
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> axes, ConstantInts(node, 1));
  if (axes.empty()) return std::vector<bool>(rank, node.GetInt("noop_with_empty_axes", 0) == 0);
  std::vector<bool> mask(rank, false);
  for (int64_t a : axes) {
    if (rank == 0) continue;
    ASSIGN_OR_RETURN(int64_t d, NormalizedAxis(node, a, static_cast<int64_t>(rank)));
    if (mask[d]) return absl::InvalidArgumentError(node.Describe() + ": repeated axis");
    mask[d] = true;
  }
  return mask;
}

bool IsReductionNode(const Node& node) {
  if (!node.domain.empty()) return false;
  return node.op_type == "Softmax" || node.op_type == "LogSoftmax" ||
         node.op_type == "LayerNormalization" || ReduceKinds().count(node.op_type) > 0;
}

absl::StatusOr<std::vector<Kernel>> EmitReduction(const Node& node, const std::string& name) {
  if (!node.input(0) || !node.output(0)) return absl::InvalidArgumentError(node.Describe() + ": operands");
  if (node.op_type == "Softmax" || node.op_type == "LogSoftmax") return Softmax(node, name);
  if (node.op_type == "LayerNormalization") return LayerNorm(node, name);
  if (ReduceKinds().count(node.op_type)) return Reduce(node, name);
  return absl::UnimplementedError("no reduction kernel for " + node.Describe());
}

}  // namespace kiln::codegen

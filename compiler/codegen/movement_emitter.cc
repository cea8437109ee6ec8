#include "compiler/codegen/movement_emitter.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "compiler/codegen/shapes.h"

namespace kiln::codegen {
namespace {

using Kind = KernelParam::Kind;

absl::StatusOr<size_t> ElemBytes(const Value* v) {
  const size_t b = DTypeSize(v->dtype);
  if (WordType(b).empty() || IsNarrowDType(v->dtype)) {
    return absl::UnimplementedError("element type " + DTypeName(v->dtype));
  }
  return b;
}

absl::StatusOr<std::vector<Kernel>> Transpose(const Node& node, const std::string& name) {
  ASSIGN_OR_RETURN(std::vector<int64_t> in, StaticShapeOf(node.input(0)));
  ASSIGN_OR_RETURN(std::vector<int64_t> out, StaticShapeOf(node.output(0)));
  ASSIGN_OR_RETURN(size_t bytes, ElemBytes(node.input(0)));
  std::vector<int64_t> perm = node.GetInts("perm");
  if (perm.empty()) {
    for (size_t d = in.size(); d-- > 0;) perm.push_back(static_cast<int64_t>(d));
  }
  if (perm.size() != in.size() || out.size() != in.size()) {
    return absl::InvalidArgumentError(node.Describe() + ": perm does not match the rank");
  }
  const std::vector<int64_t> st = RowMajorStrides(in);
  IndexSpace s;
  s.dims = out;
  s.strides.resize(2);
  for (int64_t p : perm) {
    if (p < 0 || p >= static_cast<int64_t>(in.size())) return absl::InvalidArgumentError("bad perm");
    s.strides[0].push_back(st[p]);
  }
  s.strides[1] = RowMajorStrides(out);
  s.bases = {0, 0};
  return std::vector<Kernel>{EmitStridedCopy(name, bytes, Coalesce(std::move(s)),
                                             {Kind::kInput, 0}, {Kind::kOutput, 0})};
}

absl::StatusOr<std::vector<Kernel>> Slice(const Node& node, const std::string& name) {
  ASSIGN_OR_RETURN(std::vector<int64_t> in, StaticShapeOf(node.input(0)));
  ASSIGN_OR_RETURN(std::vector<int64_t> out, StaticShapeOf(node.output(0)));
  ASSIGN_OR_RETURN(size_t bytes, ElemBytes(node.input(0)));
  ASSIGN_OR_RETURN(SliceAxes ax, ResolveSlice(node, in));
  if (out.size() != in.size()) return absl::InvalidArgumentError(node.Describe() + ": rank");
  const std::vector<int64_t> st = RowMajorStrides(in);
  IndexSpace s;
  s.dims = out;
  s.strides.resize(2);
  s.bases = {0, 0};
  for (size_t d = 0; d < in.size(); ++d) {
    s.strides[0].push_back(st[d] * ax.step[d]);
    s.bases[0] += st[d] * ax.start[d];
  }
  s.strides[1] = RowMajorStrides(out);
  return std::vector<Kernel>{EmitStridedCopy(name, bytes, Coalesce(std::move(s)),
                                             {Kind::kInput, 0}, {Kind::kOutput, 0})};
}

absl::StatusOr<std::vector<Kernel>> Expand(const Node& node, const std::string& name) {
  ASSIGN_OR_RETURN(std::vector<int64_t> in, StaticShapeOf(node.input(0)));
  ASSIGN_OR_RETURN(std::vector<int64_t> out, StaticShapeOf(node.output(0)));
  ASSIGN_OR_RETURN(size_t bytes, ElemBytes(node.input(0)));
  std::optional<std::vector<int64_t>> st = BroadcastStrides(in, out);
  if (!st) return absl::InvalidArgumentError(node.Describe() + ": does not broadcast");
  IndexSpace s{out, {*st, RowMajorStrides(out)}, {0, 0}};
  return std::vector<Kernel>{EmitStridedCopy(name, bytes, Coalesce(std::move(s)),
                                             {Kind::kInput, 0}, {Kind::kOutput, 0})};
}

// Concat (many inputs, one output) and Split (one input, many outputs): one copy per part,
// each placed at its running offset along the axis of the whole.
absl::StatusOr<std::vector<Kernel>> Parts(const Node& node, const std::string& name, bool concat) {
  const Value* whole = concat ? node.output(0) : node.input(0);
  ASSIGN_OR_RETURN(std::vector<int64_t> full, StaticShapeOf(whole));
  ASSIGN_OR_RETURN(size_t bytes, ElemBytes(whole));
  ASSIGN_OR_RETURN(int64_t axis, NormalizedAxis(node, node.GetInt("axis", concat ? 0 : 0),
                                                static_cast<int64_t>(full.size())));
  const std::vector<int64_t> full_st = RowMajorStrides(full);
  std::vector<Kernel> ks;
  int64_t at = 0;
  const size_t parts = concat ? node.inputs.size() : node.outputs.size();
  for (size_t k = 0; k < parts; ++k) {
    const Value* v = concat ? node.input(k) : node.output(k);
    if (!v) continue;
    ASSIGN_OR_RETURN(std::vector<int64_t> shape, StaticShapeOf(v));
    if (shape.size() != full.size()) return absl::InvalidArgumentError(node.Describe() + ": rank");
    IndexSpace s{shape, {RowMajorStrides(shape), full_st}, {0, at * full_st[axis]}};
    if (!concat) {
      std::swap(s.strides[0], s.strides[1]);
      std::swap(s.bases[0], s.bases[1]);
    }
    at += shape[axis];
    if (NumElements(shape) == 0) continue;
    const KernelParam part{concat ? Kind::kInput : Kind::kOutput, static_cast<int>(k)};
    const KernelParam all{concat ? Kind::kOutput : Kind::kInput, 0};
    ks.push_back(EmitStridedCopy(name + "_" + std::to_string(k), bytes, Coalesce(std::move(s)),
                                 concat ? part : all, concat ? all : part));
  }
  if (at != full[axis]) return absl::InvalidArgumentError(node.Describe() + ": parts do not add up");
  return ks;
}

absl::StatusOr<std::vector<Kernel>> Gather(const Node& node, const std::string& name) {
  ASSIGN_OR_RETURN(std::vector<int64_t> data, StaticShapeOf(node.input(0)));
  ASSIGN_OR_RETURN(std::vector<int64_t> idx, StaticShapeOf(node.input(1)));
  ASSIGN_OR_RETURN(size_t bytes, ElemBytes(node.input(0)));
  const DType it = node.input(1)->dtype;
  if (it != DType::kInt64 && it != DType::kInt32) return absl::UnimplementedError("Gather indices dtype");
  if (data.empty()) return absl::InvalidArgumentError(node.Describe() + ": scalar data");
  ASSIGN_OR_RETURN(int64_t axis, NormalizedAxis(node, node.GetInt("axis", 0), static_cast<int64_t>(data.size())));
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= data[d];
  for (size_t d = axis + 1; d < data.size(); ++d) inner *= data[d];
  const int64_t n_idx = NumElements(idx), dim = data[axis], total = outer * n_idx * inner;
  Kernel k;
  k.name = name;
  k.params = {{Kind::kInput, 0}, {Kind::kInput, 1}, {Kind::kOutput, 0}};
  k.grid = GridFor(total, k.block);
  const std::string w = WordType(bytes);
  SourceWriter s;
  s.Open(KernelSignature(k, {w, CType(it), w}));
  s.Open("for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < " +
         IntLiteral(total) + "; i += (long long)blockDim.x * gridDim.x)");
  s.Line("const long long inner = i % " + IntLiteral(inner) + ", t = i / " + IntLiteral(inner) + ";");
  s.Line("const long long j = t % " + IntLiteral(n_idx) + ", o = t / " + IntLiteral(n_idx) + ";");
  s.Line("long long x = (long long)p1[j];");
  s.Line("if (x < 0) x += " + IntLiteral(dim) + ";");
  // An index out of range (which the reference rejects) reads as zero instead of faulting.
  s.Line("p2[i] = (x >= 0 && x < " + IntLiteral(dim) + ") ? p0[(o * " + IntLiteral(dim) +
         " + x) * " + IntLiteral(inner) + " + inner] : (" + w + ")0;");
  s.Close();
  s.Close();
  k.source = s.str();
  return std::vector<Kernel>{std::move(k)};
}

}  // namespace

absl::StatusOr<SliceAxes> ResolveSlice(const Node& node, const std::vector<int64_t>& in) {
  ASSIGN_OR_RETURN(std::vector<int64_t> starts, ConstantInts(node, 1));
  ASSIGN_OR_RETURN(std::vector<int64_t> ends, ConstantInts(node, 2));
  ASSIGN_OR_RETURN(std::vector<int64_t> axes, ConstantInts(node, 3));
  ASSIGN_OR_RETURN(std::vector<int64_t> steps, ConstantInts(node, 4));
  const int64_t rank = static_cast<int64_t>(in.size());
  if (axes.empty()) {
    axes.resize(starts.size());
    std::iota(axes.begin(), axes.end(), 0);
  }
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (axes.size() != starts.size() || ends.size() != starts.size() || steps.size() != starts.size()) {
    return absl::InvalidArgumentError(node.Describe() + ": starts/ends/axes/steps lengths differ");
  }
  SliceAxes r{std::vector<int64_t>(in.size(), 0), std::vector<int64_t>(in.size(), 1)};
  for (size_t i = 0; i < axes.size(); ++i) {
    ASSIGN_OR_RETURN(int64_t a, NormalizedAxis(node, axes[i], rank));
    const int64_t dim = in[a], step = steps[i];
    if (step == 0) return absl::InvalidArgumentError(node.Describe() + ": zero step");
    int64_t s = starts[i] < 0 ? starts[i] + dim : starts[i];
    s = step > 0 ? std::clamp<int64_t>(s, 0, dim) : std::clamp<int64_t>(s, 0, std::max<int64_t>(dim - 1, 0));
    r.start[a] = s;
    r.step[a] = step;
  }
  return r;
}

Kernel EmitStridedCopy(const std::string& name, size_t elem_bytes, const IndexSpace& space,
                       KernelParam src, KernelParam dst) {
  Kernel k;
  k.name = name;
  k.params = {src, dst};
  const int64_t n = Elements(space);
  k.grid = GridFor(n, k.block);
  const std::string w = WordType(elem_bytes), it = IndexType(space);
  SourceWriter s;
  s.Open(KernelSignature(k, {w, w}));
  s.Open("for (" + it + " i = (" + it + ")blockIdx.x * blockDim.x + threadIdx.x; i < " +
         std::to_string(n) + "; i += (" + it + ")blockDim.x * gridDim.x)");
  const OffsetCode oc = EmitOffsets(space, "i");
  for (const std::string& l : oc.lines) s.Line(l);
  s.Line("p1[" + oc.offsets[1] + "] = p0[" + oc.offsets[0] + "];");
  s.Close();
  s.Close();
  k.source = s.str();
  return k;
}

bool IsMovementNode(const Node& node) {
  static const char* kOps[] = {"Transpose", "Slice", "Expand", "Concat", "Split", "Gather", "Pad", "Tile"};
  if (!node.domain.empty()) return false;
  return std::any_of(std::begin(kOps), std::end(kOps), [&](const char* op) { return node.op_type == op; });
}

absl::StatusOr<std::vector<Kernel>> EmitPadOrTile(const Node& node, const std::string& name);

absl::StatusOr<std::vector<Kernel>> EmitMovement(const Node& node, const std::string& name) {
  if (!node.input(0) || !node.output(0)) return absl::InvalidArgumentError(node.Describe() + ": operands");
  const std::string& op = node.op_type;
  if (op == "Transpose") return Transpose(node, name);
  if (op == "Slice") return Slice(node, name);
  if (op == "Expand") return Expand(node, name);
  if (op == "Concat") return Parts(node, name, true);
  if (op == "Split") return Parts(node, name, false);
  if (op == "Gather") return Gather(node, name);
  if (op == "Pad" || op == "Tile") return EmitPadOrTile(node, name);
  return absl::UnimplementedError("no movement kernel for " + node.Describe());
}

}  // namespace kiln::codegen

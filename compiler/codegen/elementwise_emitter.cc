#include "compiler/codegen/elementwise_emitter.h"

#include "compiler/codegen/index_space.h"
#include "compiler/codegen/op_expressions.h"
#include "compiler/codegen/shapes.h"
#include "ir/kiln_ops.h"

namespace kiln::codegen {
namespace {

// The index space of a program: the output, then every input through its broadcast strides.
absl::StatusOr<IndexSpace> ProgramSpace(const EwProgram& p) {
  IndexSpace s;
  s.dims = p.out_shape;
  for (const EwProgram::Input& in : p.inputs) {
    std::optional<std::vector<int64_t>> st = BroadcastStrides(in.shape, p.out_shape);
    if (!st) {
      return absl::InvalidArgumentError("shape " + ShapeToString(in.shape) +
                                        " does not broadcast to " + ShapeToString(p.out_shape));
    }
    s.strides.push_back(*st);
  }
  s.strides.push_back(RowMajorStrides(p.out_shape));
  s.bases.assign(s.strides.size(), 0);
  return Coalesce(std::move(s));
}

absl::StatusOr<std::vector<std::string>> ParamTypes(const EwProgram& p) {
  std::vector<std::string> types(p.params.size());
  auto set = [&](int param, DType t) -> absl::Status {
    if (param < 0 || param >= static_cast<int>(types.size())) {
      return absl::InternalError("program parameter out of range");
    }
    types[param] = CType(t);
    if (types[param].empty()) return absl::UnimplementedError("dtype " + DTypeName(t));
    return absl::OkStatus();
  };
  for (const EwProgram::Input& in : p.inputs) RETURN_IF_ERROR(set(in.param, in.dtype));
  RETURN_IF_ERROR(set(p.out_param, p.out_dtype));
  return types;
}

// The loop body's instructions: one `const T tJ = ...;` per step; returns the last register.
absl::StatusOr<std::string> EmitSteps(const EwProgram& p, std::vector<Operand>& regs, SourceWriter& w) {
  for (size_t j = 0; j < p.steps.size(); ++j) {
    const EwProgram::Step& st = p.steps[j];
    std::vector<Operand> args;
    for (int a : st.args) {
      if (a >= static_cast<int>(regs.size())) return absl::InvalidArgumentError("bad program operand");
      args.push_back(a < 0 ? Operand{} : regs[a]);
    }
    ASSIGN_OR_RETURN(Operand r, OpExpr(st.op, args, st.attrs));
    const std::string t = "t" + std::to_string(j);
    w.Line("const " + CType(r.dtype) + " " + t + " = " + r.expr + ";");
    regs.push_back({t, r.dtype});
  }
  if (regs.empty()) return absl::InvalidArgumentError("empty program");
  if (regs.back().dtype != p.out_dtype) {
    return absl::UnimplementedError("program computes " + DTypeName(regs.back().dtype) +
                                    ", output is " + DTypeName(p.out_dtype));
  }
  return regs.back().expr;
}

}  // namespace

absl::StatusOr<Kernel> EmitProgram(const EwProgram& p, const std::string& name) {
  ASSIGN_OR_RETURN(IndexSpace space, ProgramSpace(p));
  ASSIGN_OR_RETURN(std::vector<std::string> types, ParamTypes(p));
  Kernel k;
  k.name = name;
  k.params = p.params;
  const int64_t n = Elements(space);
  k.grid = GridFor(n, k.block);
  const std::string it = IndexType(space);
  SourceWriter w;
  w.Open(KernelSignature(k, types));
  w.Line("const " + it + " n = " + std::to_string(n) + ";");
  w.Open("for (" + it + " i = (" + it + ")blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (" +
         it + ")blockDim.x * gridDim.x)");
  const OffsetCode oc = EmitOffsets(space, "i");
  for (const std::string& l : oc.lines) w.Line(l);
  std::vector<Operand> regs;
  for (size_t in = 0; in < p.inputs.size(); ++in) {
    const std::string v = "v" + std::to_string(in);
    w.Line("const " + CType(p.inputs[in].dtype) + " " + v + " = p" +
           std::to_string(p.inputs[in].param) + "[" + oc.offsets[in] + "];");
    regs.push_back({v, p.inputs[in].dtype});
  }
  ASSIGN_OR_RETURN(std::string result, EmitSteps(p, regs, w));
  w.Line("p" + std::to_string(p.out_param) + "[" + oc.offsets.back() + "] = " + result + ";");
  w.Close();
  w.Close();
  k.source = w.str();
  return k;
}

// A QuantizeLinear/DequantizeLinear with one scale and zero point: element-wise under numpy
// broadcasting (a per-axis scale broadcasts along `axis`, not the last dim: not this one).
bool IsPerTensorQdq(const Node& node) {
  if (!node.domain.empty() || node.GetInt("block_size", 0) != 0 ||
      (node.op_type != "QuantizeLinear" && node.op_type != "DequantizeLinear")) {
    return false;
  }
  for (size_t i : {1, 2}) {
    const Value* v = node.input(i);
    if (i == 1 && !v) return false;
    if (v && (!v->shape || !IsStatic(*v->shape) || NumElements(StaticDims(*v->shape)) != 1)) {
      return false;
    }
  }
  return true;
}

bool IsElementwiseNode(const Node& node) {
  if (node.domain == kKilnDomain) return node.op_type == kiln_ops::kFusedElementwise;
  return node.domain.empty() && (IsElementwiseOpName(node.op_type) || IsPerTensorQdq(node));
}

absl::StatusOr<EwProgram> ProgramOf(const Node& node) {
  if (!IsElementwiseNode(node)) return absl::UnimplementedError("not element-wise: " + node.Describe());
  EwProgram p;
  ASSIGN_OR_RETURN(p.out_shape, StaticShapeOf(node.output(0)));
  p.out_dtype = node.output(0)->dtype;
  // CastLike reads only the dtype of its second input, never its data.
  const bool cast_like = node.domain.empty() && node.op_type == "CastLike";
  std::vector<int> reg_of_input(cast_like ? 1 : node.inputs.size(), -1);
  for (size_t i = 0; i < reg_of_input.size(); ++i) {
    const Value* v = node.inputs[i];
    if (!v) continue;
    EwProgram::Input in;
    in.dtype = v->dtype;
    ASSIGN_OR_RETURN(in.shape, StaticShapeOf(v));
    in.param = static_cast<int>(p.params.size());
    p.params.push_back({KernelParam::Kind::kInput, static_cast<int>(i)});
    reg_of_input[i] = static_cast<int>(p.inputs.size());
    p.inputs.push_back(std::move(in));
  }
  p.out_param = static_cast<int>(p.params.size());
  p.params.push_back({KernelParam::Kind::kOutput, 0});
  if (cast_like) {
    if (!node.input(1)) return absl::InvalidArgumentError(node.Describe() + ": CastLike needs a target");
    const int64_t to = static_cast<int64_t>(node.input(1)->dtype);
    p.steps.push_back({"Cast", reg_of_input, {{"to", Attribute::Int(to)}}});
    return p;
  }
  if (node.domain.empty()) {
    EwProgram::Step st{node.op_type, reg_of_input, node.attrs};
    p.steps.push_back(std::move(st));
    return p;
  }
  ASSIGN_OR_RETURN(kiln_ops::Program prog, kiln_ops::ReadProgram(node));
  if (kiln_ops::ConcatInputs(node) != 0) {  // fuse_concat_elementwise is off for CUDA
    return absl::UnimplementedError(node.Describe() + ": concatenated program inputs");
  }
  for (const kiln_ops::Instruction& ins : prog.instructions) {
    EwProgram::Step st{ins.op, {}, ins.attrs};
    for (int64_t a : ins.operands) st.args.push_back(static_cast<int>(a));
    p.steps.push_back(std::move(st));
  }
  // FusedElementwise inputs are never omitted, so input k is register k.
  for (int r : reg_of_input) {
    if (r < 0) return absl::InvalidArgumentError(node.Describe() + ": omitted program input");
  }
  return p;
}

absl::StatusOr<std::vector<Kernel>> EmitElementwise(const Node& node, const std::string& name) {
  ASSIGN_OR_RETURN(EwProgram p, ProgramOf(node));
  ASSIGN_OR_RETURN(Kernel k, EmitProgram(p, name));
  return std::vector<Kernel>{std::move(k)};
}

}  // namespace kiln::codegen

// Shape rules for Kiln's fused operators: each delegates to the rule of the operator it
// wraps (an epilogue never changes the shape: residuals must broadcast to the output).
#include "compiler/shape/infer.h"
#include "compiler/shape/nn_rules.h"
#include "compiler/shape/shape_util.h"
#include "ir/kiln_ops.h"

namespace kiln::shape {
namespace {

// Runs the ai.onnx rule of `op` on a temporary node that reads `inputs` and writes the fused
// node's first output.
absl::Status DelegateRule(InferContext& ctx, Graph& graph, const std::string& op,
                          std::vector<Value*> inputs) {
  const InferFn* rule = RuleRegistry::Default().Find("", op);
  if (!rule) return ctx.Unsupported("no shape rule for " + op);
  Node tmp;
  tmp.name = ctx.node().name;
  tmp.op_type = op;
  tmp.opset = ctx.node().opset;
  for (const auto& [name, a] : ctx.node().attrs) {
    if (!kiln_ops::IsEpilogueAttribute(name)) tmp.attrs[name] = a;
  }
  tmp.inputs = std::move(inputs);
  tmp.outputs = {ctx.node().output(0)};
  InferContext sub(graph, tmp);
  return (*rule)(sub);
}

// A FusedElementwise's output shape: its operands broadcast, operand 0 being the
// concatenation of the first `concat_inputs` inputs along the channels (kiln_ops.h) when it
// has that attribute; nullopt while an operand's shape is unknown.
absl::StatusOr<std::optional<Shape>> ProgramShape(const InferContext& ctx) {
  const int64_t k = kiln_ops::ConcatInputs(ctx.node());
  if (k < 2) return BroadcastInputs(ctx);
  std::vector<Shape> shapes;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    std::optional<Shape> s = ctx.input_shape(i);
    if (!s) return std::optional<Shape>();
    shapes.push_back(std::move(*s));
  }
  Shape& joined = shapes[0];
  for (int64_t i = 1; i < k; ++i) {
    const Shape& s = shapes[static_cast<size_t>(i)];
    if (s.size() != joined.size() || s.size() < 2)
      return ctx.Invalid("concatenated inputs differ in rank");
    for (size_t d = 0; d < s.size(); ++d) {
      if (d != 1 && s[d].known() && joined[d].known() && !(s[d] == joined[d])) {
        return ctx.Invalid("concatenated inputs differ outside the channels");
      }
    }
    joined[1] = joined[1].known() && s[1].known() ? Dim(joined[1].value + s[1].value) : Dim();
  }
  shapes.erase(shapes.begin() + 1, shapes.begin() + k);
  ASSIGN_OR_RETURN(Shape out, BroadcastShapes(ctx, shapes));
  return std::optional<Shape>(std::move(out));
}

std::vector<Value*> FirstInputs(const Node& n, size_t count) {
  std::vector<Value*> v;
  for (size_t i = 0; i < count && i < n.inputs.size(); ++i) v.push_back(n.inputs[i]);
  return v;
}

}  // namespace

void RegisterKilnRules(RuleRegistry& r) {
  r.Register(kKilnDomain, kiln_ops::kFusedConv, [](InferContext& ctx) {
    return DelegateRule(ctx, ctx.graph(), "Conv", FirstInputs(ctx.node(), 3));
  });
  r.Register(kKilnDomain, kiln_ops::kFusedMatMul, [](InferContext& ctx) {
    const Node& n = ctx.node();
    // 2-D operands follow Gemm (transA/transB, C); anything else is MatMul's broadcasting.
    auto a = ctx.input_shape(0), b = ctx.input_shape(1);
    if (a && b && a->size() == 2 && b->size() == 2) return DelegateRule(ctx, ctx.graph(), "Gemm", FirstInputs(n, 3));
    // N-D: transA/transB swap the operand's last two dims, then MatMul's broadcasting.
    for (auto [s, flag] : {std::pair{&a, "transA"}, std::pair{&b, "transB"}}) {
      if (!*s || n.GetInt(flag, 0) == 0) continue;
      if ((*s)->size() < 2) return ctx.Invalid(std::string(flag) + " needs an operand of rank >= 2");
      std::swap((*s)->at((*s)->size() - 1), (*s)->at((*s)->size() - 2));
    }
    ASSIGN_OR_RETURN(std::optional<Shape> out, MatMulShapes(ctx, a, b));
    ctx.set_output(0, ctx.input_dtype(0), out);
    return absl::OkStatus();
  });
  r.Register(kKilnDomain, kiln_ops::kFusedElementwise, [](InferContext& ctx) -> absl::Status {
    ASSIGN_OR_RETURN(kiln_ops::Program p, kiln_ops::ReadProgram(ctx.node()));
    ASSIGN_OR_RETURN(std::optional<Shape> shape, ProgramShape(ctx));
    DType dtype = p.dtype != DType::kUndefined ? p.dtype : ctx.input_dtype(0);
    ctx.set_output(0, dtype, shape);
    return absl::OkStatus();
  });
}

}  // namespace kiln::shape

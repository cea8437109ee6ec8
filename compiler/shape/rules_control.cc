// Shape rules for control flow: If, Loop, Scan. A body is inferred on a clone (bodies are
// immutable once imported) with its inputs and captures typed from the node's operands; the
// node's outputs follow from the body's. Where two sources disagree (If's branches, a loop's
// carried value before and after an iteration) a dim stays only where they agree.
#include <algorithm>

#include "compiler/shape/shape_util.h"

namespace kiln::shape {
namespace {

// Dims both shapes agree on; unknown rank when the ranks differ.
std::optional<Shape> Merge(const std::optional<Shape>& a, const std::optional<Shape>& b) {
  if (!a || !b || a->size() != b->size()) return std::nullopt;
  Shape out;
  for (size_t i = 0; i < a->size(); ++i) out.push_back((*a)[i] == (*b)[i] ? (*a)[i] : Dim());
  return out;
}

size_t ExplicitInputs(const Node& n) { return n.inputs.size() - n.captures.size(); }

// A clone of `body` with its captures typed from the node's trailing inputs and its inputs
// from `args` (dtype, shape), inferred. Nodes of the clone may be folded away.
absl::StatusOr<std::unique_ptr<Graph>> InferBody(
    const InferContext& ctx, const Graph& body,
    const std::vector<std::pair<DType, std::optional<Shape>>>& args) {
  const Node& n = ctx.node();
  std::unique_ptr<Graph> g = body.Clone();
  if (args.size() != g->inputs.size()) {
    return ctx.Invalid("the body takes " + std::to_string(g->inputs.size()) + " inputs, " +
                       std::to_string(args.size()) + " are given");
  }
  for (size_t i = 0; i < args.size(); ++i) {
    Value* in = g->inputs[i];
    if (args[i].first != DType::kUndefined) in->dtype = args[i].first;
    if (args[i].second) in->shape = args[i].second;
  }
  for (Value* c : g->captures) {
    const Value* outer = n.Captured(c->name);
    if (!outer) continue;
    c->dtype = outer->dtype;
    c->shape = outer->shape;
    // A constant the body reads (a Reshape's target shape kept outside, as exporters of
    // merged decoders write it) decides its shapes as it would in the enclosing graph. The
    // clone shares the buffer.
    if (outer->constant) c->constant = outer->constant;
  }
  RETURN_IF_ERROR(InferShapes(*g));
  return g;
}

const Graph* Body(const InferContext& ctx, const char* name) {
  const Attribute* a = ctx.node().FindAttr(name);
  return a && a->kind == Attribute::Kind::kGraph ? a->g.get() : nullptr;
}

absl::Status IfRule(InferContext& ctx) {
  const Graph* then_g = Body(ctx, "then_branch");
  const Graph* else_g = Body(ctx, "else_branch");
  if (!then_g || !else_g) return ctx.Invalid("then_branch and else_branch are required");
  // A constant condition takes one branch: its shapes, not the merge of both (a merged
  // decoder's cache branch grows the past, the other starts it); the other is not inferred.
  if (const Tensor* c = ctx.input_constant(0); c && c->numel() == 1) {
    then_g = else_g = c->GetDouble(0) != 0.0 ? then_g : else_g;
  }
  ASSIGN_OR_RETURN(auto t, InferBody(ctx, *then_g, {}));
  std::unique_ptr<Graph> e;
  if (then_g != else_g) {
    ASSIGN_OR_RETURN(e, InferBody(ctx, *else_g, {}));
  }
  const Graph& other = e ? *e : *t;
  if (t->outputs.size() != ctx.num_outputs() || other.outputs.size() != ctx.num_outputs()) {
    return ctx.Invalid("both branches must produce the node's " +
                       std::to_string(ctx.num_outputs()) + " outputs");
  }
  for (size_t i = 0; i < ctx.num_outputs(); ++i) {
    const Value* a = t->outputs[i];
    const Value* b = other.outputs[i];
    if (a->dtype != b->dtype && a->dtype != DType::kUndefined && b->dtype != DType::kUndefined) {
      return ctx.Invalid("the branches' output " + std::to_string(i) + " types differ");
    }
    ctx.set_output(i, a->dtype != DType::kUndefined ? a->dtype : b->dtype, Merge(a->shape, b->shape));
  }
  return absl::OkStatus();
}

// Loop(M, cond, v...) with body(iter, cond, v...) -> (cond, v..., scan...).
absl::Status LoopRule(InferContext& ctx) {
  const Graph* body = Body(ctx, "body");
  if (!body) return ctx.Invalid("the body is required");
  const size_t carried = ExplicitInputs(ctx.node()) < 2 ? 0 : ExplicitInputs(ctx.node()) - 2;
  std::vector<std::pair<DType, std::optional<Shape>>> args = {{DType::kInt64, Shape{}},
                                                              {DType::kBool, Shape{}}};
  for (size_t i = 0; i < carried; ++i) args.push_back({ctx.input_dtype(2 + i), ctx.input_shape(2 + i)});
  ASSIGN_OR_RETURN(auto g, InferBody(ctx, *body, args));
  if (g->outputs.size() < 1 + carried || ctx.num_outputs() != g->outputs.size() - 1) {
    return ctx.Invalid("the body's outputs do not match the node's");
  }
  Dim trips;  // the trip count, when the node fixes it and has no condition
  if (const Tensor* m = ctx.input_constant(0); m && m->numel() == 1 && !ctx.has_input(1)) {
    trips = Dim(std::max<int64_t>(0, m->GetInt(0)));
  }
  for (size_t i = 0; i < ctx.num_outputs(); ++i) {
    const Value* b = g->outputs[1 + i];
    if (i < carried) {
      ctx.set_output(i, ctx.input_dtype(2 + i), Merge(ctx.input_shape(2 + i), b->shape));
    } else {
      std::optional<Shape> s;
      if (b->shape) {
        s = Shape{trips};
        s->insert(s->end(), b->shape->begin(), b->shape->end());
      }
      ctx.set_output(i, b->dtype, s);
    }
  }
  return absl::OkStatus();
}

// Scan (opset 9+): states then scan inputs; body(states, slices) -> (states, scan outputs).
absl::Status ScanRule(InferContext& ctx) {
  const Node& n = ctx.node();
  const Graph* body = Body(ctx, "body");
  if (!body) return ctx.Invalid("the body is required");
  if (n.opset < 9) return ctx.Unsupported("Scan before opset 9 (sequence_lens, batch axis)");
  const int64_t m = n.GetInt("num_scan_inputs", 0);
  const int64_t total = static_cast<int64_t>(ExplicitInputs(n));
  if (m < 1 || m > total) return ctx.Invalid("num_scan_inputs is out of range");
  const int64_t states = total - m;
  const std::vector<int64_t> in_axes = n.GetInts("scan_input_axes", std::vector<int64_t>(m, 0));
  std::vector<std::pair<DType, std::optional<Shape>>> args;
  for (int64_t i = 0; i < states; ++i) args.push_back({ctx.input_dtype(i), ctx.input_shape(i)});
  Dim length;
  for (int64_t j = 0; j < m; ++j) {
    std::optional<Shape> s = ctx.input_shape(states + j);
    if (s && static_cast<int64_t>(in_axes.size()) == m) {
      const int64_t rank = static_cast<int64_t>(s->size());
      const int64_t axis = in_axes[j] < 0 ? in_axes[j] + rank : in_axes[j];
      if (axis < 0 || axis >= rank) return ctx.Invalid("a scan_input_axes entry is out of range");
      length = (*s)[axis];
      s->erase(s->begin() + axis);
    }
    args.push_back({ctx.input_dtype(states + j), s});
  }
  ASSIGN_OR_RETURN(auto g, InferBody(ctx, *body, args));
  if (static_cast<int64_t>(g->outputs.size()) < states || g->outputs.size() != ctx.num_outputs()) {
    return ctx.Invalid("the body's outputs do not match the node's");
  }
  const int64_t k = static_cast<int64_t>(g->outputs.size()) - states;
  const std::vector<int64_t> out_axes = n.GetInts("scan_output_axes", std::vector<int64_t>(k, 0));
  for (size_t i = 0; i < g->outputs.size(); ++i) {
    const Value* b = g->outputs[i];
    if (static_cast<int64_t>(i) < states) {
      ctx.set_output(i, ctx.input_dtype(i), Merge(ctx.input_shape(i), b->shape));
      continue;
    }
    std::optional<Shape> s = b->shape;
    const int64_t j = static_cast<int64_t>(i) - states;
    if (s && static_cast<int64_t>(out_axes.size()) == k) {
      const int64_t rank = static_cast<int64_t>(s->size()) + 1;
      const int64_t axis = out_axes[j] < 0 ? out_axes[j] + rank : out_axes[j];
      if (axis < 0 || axis >= rank) return ctx.Invalid("a scan_output_axes entry is out of range");
      s->insert(s->begin() + axis, length);
    }
    ctx.set_output(i, b->dtype, s);
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterControlFlowRules(RuleRegistry& r) {
  r.Register(kOnnxDomain, "If", IfRule);
  r.Register(kOnnxDomain, "Loop", LoopRule);
  r.Register(kOnnxDomain, "Scan", ScanRule);
}

}  // namespace kiln::shape

// Opset rules: operators whose meaning changed with the same signature (coerced Softmax,
// GroupNormalization per group, Cast to string names, legacy broadcast, PRelu slope, Gemm C,
// Concat default axis, Scatter).
#include "compiler/onnx/normalize/rules.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <optional>

#include "compiler/onnx/normalize/rule_util.h"

namespace kiln::onnx_io::normalize {

// Before 13 Softmax/LogSoftmax/Hardmax coerced the input to 2-D at `axis` (default 1) and
// normalized each row; from 13 they work along one axis (default -1). When `axis` is the last
// dim the two agree; otherwise Flatten(axis) + op(axis=-1) + Reshape(to Shape(X)) reproduces
// the old meaning.
absl::Status CoercedSoftmaxToAxis(Graph& g, Node& n) {
  Value* x = n.input(0);
  Value* y = n.output(0);
  if (!x || !y) return Malformed(n, "needs an input and an output");
  const int64_t axis = n.GetInt("axis", 1);
  const std::optional<int64_t> rank = KnownRank(x);
  n.attrs["axis"] = Attribute::Int(-1);
  if (axis == -1 || (rank && axis == *rank - 1)) return absl::OkStatus();
  Emitter e(g, n);
  Value* rows = e.Before("Flatten", {x}, {{"axis", Attribute::Int(axis)}});
  Value* shape = e.Before("Shape", {x});
  Value* normalized = e.Fresh("rows");
  n.inputs[0] = rows;
  n.outputs[0] = normalized;
  normalized->producer = &n;
  e.After("Reshape", {normalized, shape}, y);
  return absl::OkStatus();
}

// Repeats each group's value over the channels of that group (constant case).
static absl::StatusOr<Value*> RepeatPerGroup(Graph& g, Node& n, Value* v, int64_t groups,
                                      int64_t per_group) {
  const Tensor& t = *v->constant;
  if (t.numel() != groups) {
    return Malformed(n, "'" + v->name + "' must hold num_groups values");
  }
  Tensor out(t.dtype(), {groups * per_group});
  const size_t es = DTypeSize(t.dtype());
  for (int64_t c = 0; c < groups * per_group; ++c) {
    std::memcpy(static_cast<char*>(out.raw_mutable()) + c * es,
                static_cast<const char*>(t.raw()) + (c / per_group) * es, es);
  }
  return g.AddConstant(v->name + "_per_channel", std::move(out));
}

// Same, computed in the graph: [G] -> [G, 1] -> expand to [G, C/G] -> [C].
static Value* ExpandPerGroup(Emitter& e, Value* v, Value* target) {
  Value* column = e.Before("Unsqueeze", {v, e.Ints("axis1", {1})});
  Value* grid = e.Before("Expand", {column, target});
  return e.Before("Reshape", {grid, e.Ints("flat", {-1})});
}

// GroupNormalization-18 had one scale and bias per group; from 21 they are per channel.
// Channel c belongs to group c / (C / G), so each group's value is repeated C / G times.
absl::Status GroupNormPerChannel(Graph& g, Node& n) {
  const int64_t groups = n.GetInt("num_groups", 0);
  if (groups <= 0) return Malformed(n, "num_groups must be positive");
  if (n.inputs.size() < 3 || !n.inputs[0] || !n.inputs[1] || !n.inputs[2]) {
    return Malformed(n, "GroupNormalization needs X, scale and bias");
  }
  Value* x = n.inputs[0];
  std::optional<int64_t> channels;
  if (x->shape && x->shape->size() >= 2 && (*x->shape)[1].known()) channels = (*x->shape)[1].value;
  if (channels && *channels == groups) return absl::OkStatus();  // one channel per group
  if (channels && (*channels % groups != 0)) return Malformed(n, "C is not a multiple of G");
  if (channels && n.inputs[1]->is_constant() && n.inputs[2]->is_constant()) {
    for (size_t i : {1, 2}) {
      ASSIGN_OR_RETURN(n.inputs[i], RepeatPerGroup(g, n, n.inputs[i], groups, *channels / groups));
    }
    return absl::OkStatus();
  }
  Emitter e(g, n);
  Value* c = e.Before("Shape", {x}, {{"start", Attribute::Int(1)}, {"end", Attribute::Int(2)}});
  Value* per_group = e.Before("Div", {c, e.Ints("groups", {groups})});
  Value* target =
      e.Before("Concat", {e.Ints("groups", {groups}), per_group}, {{"axis", Attribute::Int(0)}});
  n.inputs[1] = ExpandPerGroup(e, n.inputs[1], target);
  n.inputs[2] = ExpandPerGroup(e, n.inputs[2], target);
  return absl::OkStatus();
}

// Cast-1 named the target type as a string ("FLOAT"); from 6 it is the TensorProto number.
absl::Status CastStringTo(Graph&, Node& n) {
  const Attribute* to = n.FindAttr("to");
  if (!to || to->kind != Attribute::Kind::kString) return absl::OkStatus();
  std::string name = to->s;
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::toupper(ch)); });
  onnx::TensorProto_DataType type = onnx::TensorProto_DataType_UNDEFINED;
  if (!onnx::TensorProto_DataType_Parse(name, &type) ||
      type == onnx::TensorProto_DataType_UNDEFINED) {
    return Malformed(n, "unknown Cast target type '" + to->s + "'");
  }
  n.attrs["to"] = Attribute::Int(static_cast<int64_t>(type));
  return absl::OkStatus();
}

// Reshapes B so that numpy broadcasting aligns its dims with A's starting at `axis`: B gets
// rank(A) - axis - rank(B) trailing 1-dims. Static when both ranks are known at import
// (a constant B is simply reshaped), else computed in the graph, which shape inference folds.
static Value* AlignAtAxis(Emitter& e, Graph& g, Value* a, Value* b, int64_t axis) {
  const std::optional<int64_t> ra = KnownRank(a), rb = KnownRank(b);
  if (ra && rb) {
    const int64_t trailing = *ra - (axis < 0 ? axis + *ra : axis) - *rb;
    if (trailing <= 0) return b;  // a bad fit is left for shape inference to report
    if (b->is_constant()) {
      std::vector<int64_t> dims = b->constant->shape();
      dims.insert(dims.end(), trailing, 1);
      return g.AddConstant(b->name + "_aligned", b->constant->Reshaped(dims));
    }
    std::vector<int64_t> axes;
    for (int64_t i = 0; i < trailing; ++i) axes.push_back(*rb + i);
    return e.Before("Unsqueeze", {b, e.Ints("axes", axes)});
  }
  Value* shape_b = e.Before("Shape", {b});
  Value* rank_b = e.Before("Shape", {shape_b});
  Value* count;
  if (axis >= 0) {
    Value* rank_a = e.Before("Shape", {e.Before("Shape", {a})});
    count = e.Before("Sub", {e.Before("Sub", {rank_a, rank_b}), e.Ints("axis", {axis})});
  } else {
    count = e.Before("Sub", {e.Ints("axis", {-axis}), rank_b});  // -axis - rank(B)
  }
  Value* ones = e.Before("ConstantOfShape", {count},
                         {{"value", Attribute::TensorValue(Tensor::FromInt64({1}, {1}))}});
  Value* shape = e.Before("Concat", {shape_b, ones}, {{"axis", Attribute::Int(0)}});
  return e.Before("Reshape", {b, shape});
}

// Binary operators before 7 broadcast only when broadcast=1, and only B onto A: B's shape is
// a contiguous run of A's dims starting at `axis`, or a suffix of them when axis is absent.
// The suffix case and broadcast=0 (equal shapes) are what numpy broadcasting does anyway; an
// explicit axis needs B reshaped with trailing 1-dims.
absl::Status LegacyBroadcastToNumpy(Graph& g, Node& n) {
  const bool broadcast = n.GetInt("broadcast", 0) != 0;
  const Attribute* axis_attr = n.FindAttr("axis");
  if (axis_attr && axis_attr->kind != Attribute::Kind::kInt) {
    return Malformed(n, "attribute 'axis' must be an int");
  }
  const std::optional<int64_t> axis =
      axis_attr ? std::optional<int64_t>(axis_attr->i) : std::nullopt;
  n.attrs.erase("broadcast");
  n.attrs.erase("axis");
  if (!broadcast || !axis) return absl::OkStatus();
  if (!n.input(0) || !n.input(1)) return Malformed(n, "needs two inputs");
  Emitter e(g, n);
  n.inputs[1] = AlignAtAxis(e, g, n.inputs[0], n.inputs[1], *axis);
  return absl::OkStatus();
}

// PRelu before 7 applied a slope of more than one value per channel (dim 1), Caffe2-style; from
// 7 the slope broadcasts numpy-style from the right. A 1-D slope is aligned at axis 1, which
// is what the old form meant; other slopes already had X's layout.
absl::Status PReluChannelSlope(Graph& g, Node& n) {
  Value* x = n.input(0);
  Value* slope = n.input(1);
  if (!x || !slope || KnownRank(slope) != 1) return absl::OkStatus();
  const Dim& c = slope->shape->front();
  if (c.known() && c.value == 1) return absl::OkStatus();  // one slope shared by all channels
  Emitter e(g, n);
  n.inputs[1] = AlignAtAxis(e, g, x, slope, 1);
  return absl::OkStatus();
}

// Gemm before 7 broadcast C only with broadcast=1; C was then (N), (1, N), (M, N) or one
// element, all of which numpy (unidirectional) broadcasting accepts the same way.
absl::Status GemmLegacyBroadcast(Graph&, Node& n) {
  n.attrs.erase("broadcast");
  return absl::OkStatus();
}

// Concat-1's axis was optional with default 1; from 4 it is required.
absl::Status ConcatDefaultAxis(Graph&, Node& n) {
  if (!n.HasAttr("axis")) n.attrs["axis"] = Attribute::Int(1);
  return absl::OkStatus();
}

// Scatter (9, deprecated in 11) is ScatterElements under its old name.
absl::Status ScatterToScatterElements(Graph&, Node& n) {
  n.op_type = "ScatterElements";
  return absl::OkStatus();
}

}  // namespace kiln::onnx_io::normalize

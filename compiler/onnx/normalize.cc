// Opset normalization. Each rule below rewrites one operator family from an older ai.onnx
// signature into the kInternalOpset signature; the table at the bottom says which rule applies
// to which operator below which opset. Rules edit the node in place (it keeps its name and
// imported opset) and add helper nodes and constants around it.
#include "compiler/onnx/normalize.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <limits>
#include <optional>

namespace kiln::onnx_io {
namespace {

constexpr int64_t kEveryOpset = std::numeric_limits<int64_t>::max();
using Attrs = std::map<std::string, Attribute>;

absl::Status Unconvertible(const Node& n, const std::string& why) {
  return absl::UnimplementedError(n.Describe() + " cannot be normalized to opset " +
                                  std::to_string(kInternalOpset) + ": " + why);
}

absl::Status Malformed(const Node& n, const std::string& why) {
  return absl::InvalidArgumentError(n.Describe() + ": " + why);
}

std::optional<int64_t> KnownRank(const Value* v) {
  if (!v || !v->shape) return std::nullopt;
  return static_cast<int64_t>(v->shape->size());
}

void SetInput(Node& n, size_t i, Value* v) {
  if (n.inputs.size() <= i) n.inputs.resize(i + 1, nullptr);
  n.inputs[i] = v;
}

bool IsUsed(const Graph& g, const Value* v) {
  return v && (g.IsGraphOutput(v) || !g.Consumers(v).empty());
}

// Drops output i (an unused optional output) so nothing claims n produces it.
void DropOutput(Node& n, size_t i) {
  if (i >= n.outputs.size()) return;
  if (n.outputs[i] && n.outputs[i]->producer == &n) n.outputs[i]->producer = nullptr;
  n.outputs[i] = nullptr;
  while (!n.outputs.empty() && !n.outputs.back()) n.outputs.pop_back();
}

absl::StatusOr<std::vector<int64_t>> IntsAttr(const Node& n, const std::string& key) {
  const Attribute* a = n.FindAttr(key);
  if (!a || a->kind != Attribute::Kind::kInts) {
    return Malformed(n, "attribute '" + key + "' must be a list of ints");
  }
  return a->ints;
}

// Builds the helper nodes and constants of one rewritten node. Helpers take the rewritten
// node's imported opset and a name derived from its name, so an error in a helper still
// points at the node the model author wrote.
class Emitter {
 public:
  Emitter(Graph& g, Node& n) : g_(g), n_(n) {}

  // A 1-D int64 constant (axes, pads, shapes: the newest forms want int64 vectors).
  Value* Ints(const std::string& what, const std::vector<int64_t>& v) {
    return g_.AddConstant(n_.name + "_" + what,
                          Tensor::FromInt64(v, {static_cast<int64_t>(v.size())}));
  }
  Value* Floats(const std::string& what, const std::vector<float>& v) {
    return g_.AddConstant(n_.name + "_" + what,
                          Tensor::FromFloat(v, {static_cast<int64_t>(v.size())}));
  }
  // A scalar with the element type of `like`. At import an intermediate's type is usually
  // unknown (no value_info): then a float constant goes through CastLike, which shape
  // inference folds once the type is known.
  Value* ScalarLike(const std::string& what, double v, Value* like) {
    if (IsSupportedDType(like->dtype) && like->dtype != DType::kBool) {
      return g_.AddConstant(n_.name + "_" + what, Tensor::Scalar(like->dtype, v));
    }
    Value* f = g_.AddConstant(n_.name + "_" + what, Tensor::Scalar(DType::kFloat32, v));
    return Before("CastLike", {f, like});
  }
  Value* Fresh(const std::string& what) { return g_.NewValue(n_.name + "_" + what); }

  // Adds `op` ahead of the rewritten node (it computes something the node reads).
  Value* Before(const std::string& op, std::vector<Value*> ins, Attrs attrs = {}) {
    Value* out = Fresh(op);
    g_.InsertNode(&n_, Make(op, std::move(ins), out, std::move(attrs)));
    return out;
  }
  // Adds `op` behind the rewritten node (and behind earlier After() nodes), writing `out`.
  void After(const std::string& op, std::vector<Value*> ins, Value* out, Attrs attrs = {}) {
    const Node* anchor = last_after_ ? last_after_ : &n_;
    Node* next = nullptr;
    const auto& nodes = g_.nodes();
    for (size_t i = 0; i + 1 < nodes.size(); ++i) {
      if (nodes[i].get() == anchor) next = nodes[i + 1].get();
    }
    last_after_ = g_.InsertNode(next, Make(op, std::move(ins), out, std::move(attrs)));
  }

 private:
  std::unique_ptr<Node> Make(const std::string& op, std::vector<Value*> ins, Value* out,
                             Attrs attrs) {
    auto node = std::make_unique<Node>();
    node->name = n_.name + "/" + op + "_" + std::to_string(count_++);
    node->op_type = op;
    node->domain = kOnnxDomain;
    node->opset = n_.opset;
    node->inputs = std::move(ins);
    node->outputs = {out};
    node->attrs = std::move(attrs);
    return node;
  }

  Graph& g_;
  Node& n_;
  Node* last_after_ = nullptr;
  int count_ = 0;
};

// ---------------------------------------------------------------------------------------
// Attributes that became inputs.

// consumed_inputs (opset 1) was a memory-reuse hint for Caffe2; no newer signature has it.
absl::Status DropConsumedInputs(Graph&, Node& n) {
  n.attrs.erase("consumed_inputs");
  return absl::OkStatus();
}

// Squeeze/Unsqueeze (<13) and Reduce* (<13 for ReduceSum, <18 for the rest) took `axes` as an
// attribute; the newest forms take the optional input 1. An absent or empty list stays an
// omitted input: both mean "every axis" (for Squeeze: every size-1 axis), as before.
absl::Status AxesAttrToInput(Graph& g, Node& n) {
  if (!n.HasAttr("axes")) {
    if (n.op_type == "Unsqueeze" && !n.input(1)) return Malformed(n, "Unsqueeze needs axes");
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> axes, IntsAttr(n, "axes"));
  if (n.input(1)) return Malformed(n, "axes given both as attribute and as input");
  n.attrs.erase("axes");
  if (axes.empty() && n.op_type != "Unsqueeze") return absl::OkStatus();
  SetInput(n, 1, Emitter(g, n).Ints("axes", axes));
  return absl::OkStatus();
}

// An int64 version of `v`: Split-1 took its sizes as a second input of the data's type.
Value* AsInt64(Emitter& e, Value* v) {
  if (v->is_constant()) return e.Ints("split", v->constant->ToInt64Vector());
  return e.Before("Cast", {v}, {{"to", Attribute::Int(static_cast<int64_t>(DType::kInt64))}});
}

// Split (<13) took the part sizes as the `split` attribute (or, in Split-1, as an input of
// the data's type); from 13 they are an int64 input. Since 18 an equal split names its part
// count in `num_outputs`, so the kernel never has to infer it from the output list.
absl::Status SplitSizesToInput(Graph& g, Node& n) {
  Emitter e(g, n);
  if (n.HasAttr("split")) {
    ASSIGN_OR_RETURN(std::vector<int64_t> split, IntsAttr(n, "split"));
    if (n.input(1)) return Malformed(n, "split given both as attribute and as input");
    n.attrs.erase("split");
    if (!split.empty()) SetInput(n, 1, e.Ints("split", split));
  } else if (n.input(1) && n.opset < 2) {
    n.inputs[1] = AsInt64(e, n.inputs[1]);
  }
  if (!n.input(1) && !n.HasAttr("num_outputs")) {
    n.attrs["num_outputs"] = Attribute::Int(static_cast<int64_t>(n.outputs.size()));
  }
  return absl::OkStatus();
}

// Clip (<11) took min/max as float attributes; from 11 they are optional scalar inputs of the
// input's type. An absent bound stays an omitted input (unbounded; Clip-6's +-FLT_MAX
// defaults are unbounded for every type Clip-6 allowed, up to doubles beyond 3.4e38).
absl::Status ClipAttrsToInputs(Graph& g, Node& n) {
  Value* x = n.input(0);
  if (!x) return Malformed(n, "has no input");
  Emitter e(g, n);
  const std::pair<const char*, size_t> bounds[] = {{"min", 1}, {"max", 2}};
  for (const auto& [key, slot] : bounds) {
    if (!n.HasAttr(key)) continue;
    SetInput(n, slot, e.ScalarLike(key, n.GetFloat(key, 0.0f), x));
    n.attrs.erase(key);
  }
  return absl::OkStatus();
}

// Pad (<11) took pads and value as attributes; from 11 they are inputs (int64 pads, a scalar
// constant_value of the data's type). Pad-1 named the list `paddings`; its attribute
// documentation gives the same [x1_begin, x2_begin, ..., x1_end, x2_end, ...] layout as
// Pad-2's `pads` (Pad-2 renamed it), so it is taken as is. A zero value stays an omitted
// input, which means zero.
absl::Status PadAttrsToInputs(Graph& g, Node& n) {
  Value* x = n.input(0);
  if (!x) return Malformed(n, "has no input");
  const char* key = n.HasAttr("pads") ? "pads" : "paddings";
  ASSIGN_OR_RETURN(std::vector<int64_t> pads, IntsAttr(n, key));
  const float value = n.GetFloat("value", 0.0f);
  n.attrs.erase(key);
  n.attrs.erase("value");
  Emitter e(g, n);
  SetInput(n, 1, e.Ints("pads", pads));
  if (value != 0.0f && n.GetString("mode", "constant") == "constant") {
    SetInput(n, 2, e.ScalarLike("constant_value", value, x));
  }
  return absl::OkStatus();
}

// Slice (<10) took starts/ends/axes as attributes; from 10 they are int64 inputs 1..3.
absl::Status SliceAttrsToInputs(Graph& g, Node& n) {
  if (!n.HasAttr("starts") && n.input(1)) return absl::OkStatus();  // already inputs
  ASSIGN_OR_RETURN(std::vector<int64_t> starts, IntsAttr(n, "starts"));
  ASSIGN_OR_RETURN(std::vector<int64_t> ends, IntsAttr(n, "ends"));
  Emitter e(g, n);
  SetInput(n, 1, e.Ints("starts", starts));
  SetInput(n, 2, e.Ints("ends", ends));
  if (n.HasAttr("axes")) {
    ASSIGN_OR_RETURN(std::vector<int64_t> axes, IntsAttr(n, "axes"));
    SetInput(n, 3, e.Ints("axes", axes));
  }
  n.attrs.erase("starts");
  n.attrs.erase("ends");
  n.attrs.erase("axes");
  return absl::OkStatus();
}

// TopK (<10) took k as an attribute; from 10 it is a 1-element int64 input.
absl::Status TopKAttrToInput(Graph& g, Node& n) {
  const Attribute* k = n.FindAttr("k");
  if (!k) {
    if (n.input(1)) return absl::OkStatus();
    return Malformed(n, "TopK needs k");
  }
  if (k->kind != Attribute::Kind::kInt) return Malformed(n, "attribute 'k' must be an int");
  SetInput(n, 1, Emitter(g, n).Ints("k", {k->i}));
  n.attrs.erase("k");
  return absl::OkStatus();
}

// Reshape (<5) took the target shape as an attribute; from 5 it is an int64 input.
absl::Status ReshapeAttrToInput(Graph& g, Node& n) {
  if (!n.HasAttr("shape")) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::vector<int64_t> shape, IntsAttr(n, "shape"));
  SetInput(n, 1, Emitter(g, n).Ints("shape", shape));
  n.attrs.erase("shape");
  return absl::OkStatus();
}

// Before opset 10 Dropout's mask had the data's type; from 10 it is bool. A used mask gets a
// CastLike back to the data's type, an unused one is dropped.
absl::Status DropoutMaskToDataType(Graph& g, Node& n) {
  Value* mask = n.output(1);
  if (!mask) return absl::OkStatus();
  if (!IsUsed(g, mask)) {
    DropOutput(n, 1);
    return absl::OkStatus();
  }
  Emitter e(g, n);
  Value* bool_mask = e.Fresh("mask");
  n.outputs[1] = bool_mask;
  bool_mask->producer = &n;
  e.After("CastLike", {bool_mask, n.input(0)}, mask);
  return absl::OkStatus();
}

// Dropout (<12) took ratio as an attribute; from 12 it is an optional scalar input. is_test
// (1, 6) chose training vs inference behaviour: Kiln serves inference, which is what the
// newest Dropout does without training_mode, so it is dropped.
absl::Status DropoutAttrsToInputs(Graph& g, Node& n) {
  if (!n.input(0)) return Malformed(n, "has no input");
  n.attrs.erase("is_test");
  n.attrs.erase("spatial");
  if (n.HasAttr("ratio")) {
    const float ratio = n.GetFloat("ratio", 0.5f);
    SetInput(n, 1, g.AddConstant(n.name + "_ratio", Tensor::Scalar(DType::kFloat32, ratio)));
    n.attrs.erase("ratio");
  }
  if (n.opset < 10) return DropoutMaskToDataType(g, n);
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------
// BatchNormalization.

// spatial=0 (BN before opset 9) kept statistics per activation: scale/B/mean/var have shape
// (C, D1, ..., Dn) and the op is elementwise. The newest BN has no such variant, but numpy
// broadcasting over the batch dim expresses it exactly:
// Y = (X - mean) / sqrt(var + epsilon) * scale + B.
absl::Status PerActivationBatchNorm(Graph& g, Node& n) {
  for (size_t i = 1; i < n.outputs.size(); ++i) {
    if (IsUsed(g, n.outputs[i])) {
      return Unconvertible(n, "spatial=0 with training statistics outputs");
    }
  }
  if (n.inputs.size() < 5 || std::count(n.inputs.begin(), n.inputs.end(), nullptr)) {
    return Malformed(n, "BatchNormalization needs X, scale, B, mean and var");
  }
  Value *x = n.inputs[0], *scale = n.inputs[1], *bias = n.inputs[2];
  Value *mean = n.inputs[3], *var = n.inputs[4];
  Emitter e(g, n);
  Value* eps = e.ScalarLike("epsilon", n.GetFloat("epsilon", 1e-5f), var);
  Value* centered = e.Before("Sub", {x, mean});
  Value* stddev = e.Before("Sqrt", {e.Before("Add", {var, eps})});
  Value* scaled = e.Before("Mul", {e.Before("Div", {centered, stddev}), scale});
  while (n.outputs.size() > 1) DropOutput(n, n.outputs.size() - 1);
  n.op_type = "Add";
  n.inputs = {scaled, bias};
  n.attrs.clear();
  return absl::OkStatus();
}

// BatchNormalization before 14 had five outputs (Y, mean, var, saved_mean, saved_var, the
// last four for training); from 14 there are three and training_mode says whether the running
// statistics are updated. is_test (<7) and spatial (<9) are gone; momentum is kept as is.
absl::Status BatchNormLegacy(Graph& g, Node& n) {
  n.attrs.erase("is_test");
  const int64_t spatial = n.GetInt("spatial", 1);
  n.attrs.erase("spatial");
  if (spatial == 0 && n.opset < 9) return PerActivationBatchNorm(g, n);
  for (size_t i = 3; i < n.outputs.size(); ++i) {
    if (IsUsed(g, n.outputs[i])) return Unconvertible(n, "uses saved_mean/saved_var");
  }
  const bool stats = IsUsed(g, n.output(1)) || IsUsed(g, n.output(2));
  for (size_t i = n.outputs.size(); i > 1; --i) {
    if (i - 1 >= 3 || !IsUsed(g, n.outputs[i - 1])) DropOutput(n, i - 1);
  }
  if (stats) n.attrs["training_mode"] = Attribute::Int(1);
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------
// Upsample and Resize.

// Sets Resize-10's nearest rounding. Resize-10 rounds a source coordinate down when an axis
// is upsampled and up when it is downsampled (its conformance test expects [1, 3] from
// [1, 2, 3, 4] at scale 0.6; ONNX Runtime does the same). nearest_mode is one per node, so a
// mix becomes two Resize nodes: nearest interpolation is separable per axis, so downsampling
// the shrinking axes (ceil) and then upsampling the growing ones (floor) is exact. Scales
// computed at run time are taken as upsampling: what every opset-10 exporter emitted them for.
absl::Status SetResize10NearestMode(Graph& g, Node& n) {
  Value* scales = n.inputs[2];
  if (!scales->is_constant()) {
    n.attrs["nearest_mode"] = Attribute::String("floor");
    return absl::OkStatus();
  }
  std::vector<double> s = scales->constant->ToDoubleVector();
  const bool down = std::any_of(s.begin(), s.end(), [](double v) { return v < 1.0; });
  const bool up = std::any_of(s.begin(), s.end(), [](double v) { return v > 1.0; });
  n.attrs["nearest_mode"] = Attribute::String(down ? "ceil" : "floor");
  if (!down || !up) return absl::OkStatus();
  std::vector<float> shrink, grow;
  for (double v : s) {
    shrink.push_back(v < 1.0 ? static_cast<float>(v) : 1.0f);
    grow.push_back(v > 1.0 ? static_cast<float>(v) : 1.0f);
  }
  Emitter e(g, n);
  n.inputs[2] = e.Floats("scales_down", shrink);
  Value* y = n.outputs[0];
  Value* mid = e.Fresh("downsampled");
  n.outputs[0] = mid;
  mid->producer = &n;
  Attrs attrs = n.attrs;
  attrs["nearest_mode"] = Attribute::String("floor");
  e.After("Resize", {mid, nullptr, e.Floats("scales_up", grow)}, y, std::move(attrs));
  return absl::OkStatus();
}

// Resize-10 was Upsample-10 under a new name: (X, scales), output = floor(in * scale), source
// coordinate = output coordinate / scale. From 11 that is coordinate_transformation_mode
// "asymmetric" with an explicit nearest rounding, and the inputs are (X, roi, scales).
absl::Status Resize10ToNewest(Graph& g, Node& n) {
  if (n.inputs.size() != 2) return absl::OkStatus();  // already (X, roi, scales[, sizes])
  const std::string mode = n.GetString("mode", "nearest");
  if (mode != "nearest" && mode != "linear") return Unconvertible(n, "mode '" + mode + "'");
  if (!n.inputs[0] || !n.inputs[1]) return Malformed(n, "Resize-10 needs X and scales");
  n.inputs = {n.inputs[0], nullptr, n.inputs[1]};
  n.attrs["coordinate_transformation_mode"] = Attribute::String("asymmetric");
  if (mode == "nearest") return SetResize10NearestMode(g, n);
  return absl::OkStatus();
}

// Upsample's scales: height/width attributes (1; NCHW only), a `scales` attribute (7, 8) or
// an input (9, 10).
absl::StatusOr<Value*> UpsampleScales(Graph& g, Node& n) {
  Emitter e(g, n);
  if (n.opset >= 9) {
    if (!n.input(1)) return Malformed(n, "Upsample needs scales");
    return n.inputs[1];
  }
  if (n.HasAttr("scales")) {
    const Attribute* a = n.FindAttr("scales");
    if (a->kind != Attribute::Kind::kFloats) return Malformed(n, "'scales' must be floats");
    return e.Floats("scales", a->floats);
  }
  if (!n.HasAttr("height_scale") || !n.HasAttr("width_scale")) {
    return Malformed(n, "Upsample needs height_scale and width_scale");
  }
  return e.Floats("scales",
                  {1.0f, 1.0f, n.GetFloat("height_scale", 1.0f), n.GetFloat("width_scale", 1.0f)});
}

// Upsample (deprecated in 10) is Resize with asymmetric coordinates; its scales are >= 1 by
// specification, so nearest rounds down (floor), which is what repeating elements means.
absl::Status UpsampleToResize(Graph& g, Node& n) {
  std::string mode = n.GetString("mode", "nearest");
  if (mode == "bilinear") mode = "linear";  // Upsample-1's name for it
  if (mode != "nearest" && mode != "linear") return Unconvertible(n, "mode '" + mode + "'");
  if (!n.input(0)) return Malformed(n, "has no input");
  ASSIGN_OR_RETURN(Value * scales, UpsampleScales(g, n));
  n.op_type = "Resize";
  n.inputs = {n.inputs[0], nullptr, scales};
  n.attrs.clear();
  n.attrs["mode"] = Attribute::String(mode);
  n.attrs["coordinate_transformation_mode"] = Attribute::String("asymmetric");
  if (mode == "nearest") n.attrs["nearest_mode"] = Attribute::String("floor");
  return absl::OkStatus();
}

// Resize-11's tf_half_pixel_for_nn (removed in 13) maps x to (x + 0.5) / scale, which is
// half_pixel's mapping plus 0.5. floor of it is half_pixel with round_prefer_ceil, and
// round_prefer_floor of it is half_pixel with ceil; the other two roundings (and linear or
// cubic interpolation) have no newest equivalent.
absl::Status ResizeTfHalfPixelForNn(Graph&, Node& n) {
  if (n.GetString("coordinate_transformation_mode", "") != "tf_half_pixel_for_nn") {
    return absl::OkStatus();
  }
  if (n.GetString("mode", "nearest") != "nearest") {
    return Unconvertible(n, "tf_half_pixel_for_nn with mode '" + n.GetString("mode", "") + "'");
  }
  const std::string rounding = n.GetString("nearest_mode", "round_prefer_floor");
  std::string mapped;
  if (rounding == "floor") mapped = "round_prefer_ceil";
  if (rounding == "round_prefer_floor") mapped = "ceil";
  if (mapped.empty()) {
    return Unconvertible(n, "tf_half_pixel_for_nn with nearest_mode '" + rounding + "'");
  }
  n.attrs["coordinate_transformation_mode"] = Attribute::String("half_pixel");
  n.attrs["nearest_mode"] = Attribute::String(mapped);
  return absl::OkStatus();
}

// Resize-11 required roi and scales (an empty scales tensor meant "use sizes"); from 13 both
// are optional. roi matters only for tf_crop_and_resize. Omitted inputs are the one form the
// kernels see.
absl::Status ResizeOptionalInputs(Graph&, Node& n) {
  if (n.inputs.size() < 3) return absl::OkStatus();
  if (n.GetString("coordinate_transformation_mode", "half_pixel") != "tf_crop_and_resize") {
    n.inputs[1] = nullptr;
  }
  Value* scales = n.inputs[2];
  if (scales && scales->is_constant() && scales->constant->numel() == 0 && n.input(3)) {
    n.inputs[2] = nullptr;
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------
// Operators whose meaning changed with the same signature.

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
absl::StatusOr<Value*> RepeatPerGroup(Graph& g, Node& n, Value* v, int64_t groups,
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
Value* ExpandPerGroup(Emitter& e, Value* v, Value* target) {
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
Value* AlignAtAxis(Emitter& e, Graph& g, Value* a, Value* b, int64_t axis) {
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

// Tile-1 repeated along one axis (inputs: input, tiles, axis); from 6 `repeats` holds one
// count per dim. Convertible when tiles and axis are constants and the input rank is known.
absl::Status TileAxisToRepeats(Graph& g, Node& n) {
  if (n.inputs.size() != 3) return absl::OkStatus();  // already (input, repeats)
  Value *x = n.inputs[0], *tiles = n.inputs[1], *axis = n.inputs[2];
  const std::optional<int64_t> rank = KnownRank(x);
  if (!x || !tiles || !axis || !tiles->is_constant() || !axis->is_constant() || !rank ||
      tiles->constant->numel() != 1 || axis->constant->numel() != 1) {
    return Unconvertible(n, "Tile-1 needs constant tiles and axis and an input of known rank");
  }
  int64_t ax = axis->constant->GetInt(0);
  if (ax < 0) ax += *rank;
  if (ax < 0 || ax >= *rank) return Malformed(n, "axis out of range");
  std::vector<int64_t> repeats(*rank, 1);
  repeats[ax] = tiles->constant->GetInt(0);
  n.inputs = {x, Emitter(g, n).Ints("repeats", repeats)};
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------
// The rule table: rule applies to `op` (or every ai.onnx op for "*") imported below opset
// `below`. Order matters where a rule renames the op (Upsample -> Resize runs before the
// Resize rules, which then see the newest form and leave it).

using Rule = absl::Status (*)(Graph&, Node&);
struct RuleEntry {
  const char* op;
  int64_t below;
  Rule rule;
};

constexpr RuleEntry kRules[] = {
    {"*", kEveryOpset, DropConsumedInputs},
    {"Squeeze", 13, AxesAttrToInput},
    {"Unsqueeze", 13, AxesAttrToInput},
    {"ReduceSum", 13, AxesAttrToInput},
    {"ReduceL1", 18, AxesAttrToInput},
    {"ReduceL2", 18, AxesAttrToInput},
    {"ReduceLogSum", 18, AxesAttrToInput},
    {"ReduceLogSumExp", 18, AxesAttrToInput},
    {"ReduceMax", 18, AxesAttrToInput},
    {"ReduceMean", 18, AxesAttrToInput},
    {"ReduceMin", 18, AxesAttrToInput},
    {"ReduceProd", 18, AxesAttrToInput},
    {"ReduceSumSquare", 18, AxesAttrToInput},
    {"Split", 18, SplitSizesToInput},
    {"Clip", 11, ClipAttrsToInputs},
    {"Pad", 11, PadAttrsToInputs},
    {"Slice", 10, SliceAttrsToInputs},
    {"TopK", 10, TopKAttrToInput},
    {"Dropout", 12, DropoutAttrsToInputs},
    {"BatchNormalization", 14, BatchNormLegacy},
    {"Reshape", 5, ReshapeAttrToInput},
    {"Upsample", kEveryOpset, UpsampleToResize},
    {"Resize", 11, Resize10ToNewest},
    {"Resize", 13, ResizeTfHalfPixelForNn},
    {"Resize", kEveryOpset, ResizeOptionalInputs},
    {"Softmax", 13, CoercedSoftmaxToAxis},
    {"LogSoftmax", 13, CoercedSoftmaxToAxis},
    {"Hardmax", 13, CoercedSoftmaxToAxis},
    {"GroupNormalization", 21, GroupNormPerChannel},
    {"Cast", 6, CastStringTo},
    {"Add", 7, LegacyBroadcastToNumpy},
    {"Sub", 7, LegacyBroadcastToNumpy},
    {"Mul", 7, LegacyBroadcastToNumpy},
    {"Div", 7, LegacyBroadcastToNumpy},
    {"Pow", 7, LegacyBroadcastToNumpy},
    {"And", 7, LegacyBroadcastToNumpy},
    {"Or", 7, LegacyBroadcastToNumpy},
    {"Xor", 7, LegacyBroadcastToNumpy},
    {"Equal", 7, LegacyBroadcastToNumpy},
    {"Greater", 7, LegacyBroadcastToNumpy},
    {"Less", 7, LegacyBroadcastToNumpy},
    {"Gemm", 7, GemmLegacyBroadcast},
    {"PRelu", 7, PReluChannelSlope},
    {"Concat", 4, ConcatDefaultAxis},
    {"Scatter", kEveryOpset, ScatterToScatterElements},
    {"Tile", 6, TileAxisToRepeats},
};

absl::Status NormalizeNode(Graph& g, Node& n) {
  if (n.opset <= 0) {
    return absl::InvalidArgumentError(n.Describe() +
                                      ": the model does not import the ai.onnx opset");
  }
  for (const RuleEntry& r : kRules) {
    const bool op_matches = r.op[0] == '*' || n.op_type == r.op;
    if (op_matches && n.opset < r.below) RETURN_IF_ERROR(r.rule(g, n));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status NormalizeOperators(Graph& graph) {
  // Rules insert helper nodes; walk a snapshot so helpers (already newest) are not revisited.
  std::vector<Node*> nodes;
  for (const auto& n : graph.nodes()) {
    if (n->domain == kOnnxDomain) nodes.push_back(n.get());
  }
  for (Node* n : nodes) RETURN_IF_ERROR(NormalizeNode(graph, *n));
  // Every ai.onnx node is now in the internal form, so that is the graph's ai.onnx version
  // (what the exporter declares); each node's `opset` still says what the model imported.
  int64_t& version = graph.opsets[kOnnxDomain];
  version = std::max(version, kInternalOpset);
  graph.PruneUnusedValues();
  return absl::OkStatus();
}

}  // namespace kiln::onnx_io

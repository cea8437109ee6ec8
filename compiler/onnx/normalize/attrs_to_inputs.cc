// Opset rules: attributes that became inputs (axes, split sizes, Clip bounds, pads, Slice
// bounds, TopK k, Dropout ratio, Reshape shape, Tile repeats).
#include "compiler/onnx/normalize/rules.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "compiler/onnx/normalize/rule_util.h"

namespace kiln::onnx_io::normalize {

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
static Value* AsInt64(Emitter& e, Value* v) {
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
static absl::Status DropoutMaskToDataType(Graph& g, Node& n) {
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

}  // namespace kiln::onnx_io::normalize

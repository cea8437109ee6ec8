// Opset rules: BatchNormalization before opset 14 (is_test, spatial, the five outputs).
#include "compiler/onnx/normalize/rules.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "compiler/onnx/normalize/rule_util.h"

namespace kiln::onnx_io::normalize {

// spatial=0 (BN before opset 9) kept statistics per activation: scale/B/mean/var have shape
// (C, D1, ..., Dn) and the op is elementwise. The newest BN has no such variant, but numpy
// broadcasting over the batch dim expresses it exactly:
// Y = (X - mean) / sqrt(var + epsilon) * scale + B.
static absl::Status PerActivationBatchNorm(Graph& g, Node& n) {
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

}  // namespace kiln::onnx_io::normalize

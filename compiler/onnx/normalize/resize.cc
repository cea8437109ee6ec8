// Opset rules: Upsample and Resize (Upsample -> Resize, Resize-10 rounding, tf_half_pixel_for_nn,
// roi and empty scales).
#include "compiler/onnx/normalize/rules.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "compiler/onnx/normalize/rule_util.h"

namespace kiln::onnx_io::normalize {

// Sets Resize-10's nearest rounding. Resize-10 rounds a source coordinate down when an axis
// is upsampled and up when it is downsampled (its conformance test expects [1, 3] from
// [1, 2, 3, 4] at scale 0.6; ONNX Runtime does the same). nearest_mode is one per node, so a
// mix becomes two Resize nodes: nearest interpolation is separable per axis, so downsampling
// the shrinking axes (ceil) and then upsampling the growing ones (floor) is exact. Scales
// computed at run time are taken as upsampling: what every opset-10 exporter emitted them for.
static absl::Status SetResize10NearestMode(Graph& g, Node& n) {
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
static absl::StatusOr<Value*> UpsampleScales(Graph& g, Node& n) {
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

}  // namespace kiln::onnx_io::normalize

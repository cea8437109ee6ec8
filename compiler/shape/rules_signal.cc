// Shape rules for DFT, STFT, the Hann/Hamming/Blackman windows and MelWeightMatrix. Their
// output sizes depend on value inputs (dft_length, axis, frame_step, frame_length, size,
// num_mel_bins): a constant input gives a known dim and is validated like the kernel does,
// a run-time one leaves that dim unknown.
#include "compiler/shape/nn_rules.h"
#include "compiler/shape/shape_util.h"

namespace kiln::shape {
namespace {

// Constant scalar input i when present and constant; INVALID_ARGUMENT when it is not a
// positive scalar.
absl::StatusOr<std::optional<int64_t>> ConstantPositive(const InferContext& ctx, size_t i,
                                                        const std::string& what) {
  if (!ctx.has_input(i)) return std::optional<int64_t>();
  std::optional<std::vector<int64_t>> v = ConstantInts(ctx, i);
  if (!v) return std::optional<int64_t>();
  if (v->size() != 1) return ctx.Invalid(what + " must be a scalar");
  if ((*v)[0] <= 0) return ctx.Invalid(what + " must be positive, got " + std::to_string((*v)[0]));
  return std::optional<int64_t>((*v)[0]);
}

// The DFT axis in [0, rank - 2], or nullopt when opset 20's axis input is not constant.
absl::StatusOr<std::optional<int64_t>> DftAxis(const InferContext& ctx, int64_t rank) {
  const Node& node = ctx.node();
  int64_t axis = node.GetInt("axis", 1);
  if (node.opset >= 20) {
    axis = -2;
    if (ctx.has_input(2)) {
      std::optional<std::vector<int64_t>> v = ConstantInts(ctx, 2);
      if (!v) return std::optional<int64_t>();
      if (v->size() != 1) return ctx.Invalid("axis must be a scalar");
      axis = (*v)[0];
    }
  }
  const int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a > rank - 2) {
    return ctx.Invalid("axis " + std::to_string(axis) + " is out of range for rank " +
                       std::to_string(rank));
  }
  return std::optional<int64_t>(a);
}

// The input's dims with the axis resized to the transform's output length and the trailing
// dim 2 (complex), or 1 for an inverse onesided DFT's real signal.
absl::Status DftRule(InferContext& ctx) {
  std::optional<Shape> x = ctx.input_shape_or_unknown_output(0);
  if (!x) return absl::OkStatus();
  const int64_t rank = static_cast<int64_t>(x->size());
  const Dim c = rank > 0 ? x->back() : Dim();
  if (rank < 2 || (c.known() && c.value != 1 && c.value != 2)) {
    return ctx.Invalid("input must be [..., 1] (real) or [..., 2] (complex), got " +
                       ShapeToString(*x));
  }
  const bool inverse = ctx.node().GetInt("inverse", 0) != 0;
  const bool onesided = ctx.node().GetInt("onesided", 0) != 0;
  if (onesided && !inverse && c.known() && c.value == 2) {
    return ctx.Invalid("a onesided forward DFT needs a real input");
  }
  ASSIGN_OR_RETURN(std::optional<int64_t> axis, DftAxis(ctx, rank));
  ASSIGN_OR_RETURN(std::optional<int64_t> length, ConstantPositive(ctx, 1, "dft_length"));
  Shape out = *x;
  out.back() = Dim(inverse && onesided ? 1 : 2);
  const bool resizes = ctx.has_input(1) || onesided;
  if (!axis && resizes) {
    for (int64_t i = 0; i + 1 < rank; ++i) out[i] = Dim();
  }
  if (axis && resizes) {
    // L: dft_length, else the axis' size, else for irfft 2 * (n - 1).
    Dim len = length ? Dim(*length) : Dim();
    if (!ctx.has_input(1)) {
      const Dim n = (*x)[*axis];
      len = !inverse ? n : n.known() ? Dim(2 * (n.value - 1)) : Dim();
    }
    if (len.known() && len.value <= 0) return ctx.Invalid("the DFT length must be positive");
    if (onesided && !inverse) len = len.known() ? Dim(len.value / 2 + 1) : Dim();
    out[*axis] = len;
  }
  ctx.set_output(0, ctx.input_dtype(0), out);
  return absl::OkStatus();
}

// [batch, frames, bins, 2] with frames = 1 + (length - frame_length) / frame_step.
absl::Status StftRule(InferContext& ctx) {
  const DType dt = ctx.input_dtype(0);
  std::optional<Shape> sig = ctx.input_shape(0);
  if (sig && sig->size() != 3) return ctx.Invalid("signal must be [batch, length, 1 or 2]");
  const bool onesided = ctx.node().GetInt("onesided", 1) != 0;
  ASSIGN_OR_RETURN(std::optional<int64_t> step, ConstantPositive(ctx, 1, "frame_step"));
  ASSIGN_OR_RETURN(std::optional<int64_t> frame, ConstantPositive(ctx, 3, "frame_length"));
  std::optional<Shape> window = ctx.input_shape(2);
  if (window && window->size() != 1) return ctx.Invalid("window must be 1-D");
  const Dim wlen = window ? (*window)[0] : Dim();
  if (frame && wlen.known() && wlen.value != *frame) {
    return ctx.Invalid("window length differs from frame_length");
  }
  if (!ctx.has_input(3) && wlen.known()) frame = wlen.value;
  if (!ctx.has_input(2) && !ctx.has_input(3)) {
    return ctx.Invalid("needs a window or a frame_length");
  }
  Shape out = UnknownDims(4);
  out[3] = Dim(2);
  if (sig) out[0] = (*sig)[0];
  if (frame) out[2] = Dim(onesided ? *frame / 2 + 1 : *frame);
  const Dim len = sig ? (*sig)[1] : Dim();
  if (frame && len.known() && *frame > len.value) {
    return ctx.Invalid("frame_length exceeds the signal length");
  }
  if (frame && step && len.known()) out[1] = Dim(1 + (len.value - *frame) / *step);
  ctx.set_output(0, dt, out);
  return absl::OkStatus();
}

absl::StatusOr<DType> OutputDType(const InferContext& ctx) {
  const int64_t dt = ctx.node().GetInt("output_datatype", static_cast<int64_t>(DType::kFloat32));
  if (dt < 0 || dt > 1000 || !IsValidOnnxDType(static_cast<int32_t>(dt)) ||
      (!IsFloatDType(static_cast<DType>(dt)) && !IsIntegerDType(static_cast<DType>(dt)))) {
    return ctx.Invalid("output_datatype " + std::to_string(dt) + " is not a numeric type");
  }
  return static_cast<DType>(dt);
}

absl::Status WindowRule(InferContext& ctx) {
  ASSIGN_OR_RETURN(DType dt, OutputDType(ctx));
  ASSIGN_OR_RETURN(std::optional<int64_t> size, ConstantPositive(ctx, 0, "size"));
  ctx.set_output(0, dt, Shape{size ? Dim(*size) : Dim()});
  return absl::OkStatus();
}

// [dft_length / 2 + 1, num_mel_bins].
absl::Status MelWeightMatrixRule(InferContext& ctx) {
  ASSIGN_OR_RETURN(DType dt, OutputDType(ctx));
  ASSIGN_OR_RETURN(std::optional<int64_t> mel_bins, ConstantPositive(ctx, 0, "num_mel_bins"));
  ASSIGN_OR_RETURN(std::optional<int64_t> length, ConstantPositive(ctx, 1, "dft_length"));
  ASSIGN_OR_RETURN(std::optional<int64_t> rate, ConstantPositive(ctx, 2, "sample_rate"));
  (void)rate;  // only validated: it moves the bands, not the shape
  ctx.set_output(0, dt,
                 Shape{length ? Dim(*length / 2 + 1) : Dim(), mel_bins ? Dim(*mel_bins) : Dim()});
  return absl::OkStatus();
}

}  // namespace

void RegisterSignalRules(RuleRegistry& r) {
  r.Register("", "DFT", DftRule);
  r.Register("", "STFT", StftRule);
  for (const char* op : {"HannWindow", "HammingWindow", "BlackmanWindow"}) {
    r.Register("", op, WindowRule);
  }
  r.Register("", "MelWeightMatrix", MelWeightMatrixRule);
}

}  // namespace kiln::shape

// Signal processing: DFT (opset 17 with the `axis` attribute, opset 20 with `axis` as an
// optional input), STFT (opset 17), the Hann/Hamming/Blackman windows and MelWeightMatrix.
//
// Complex values travel as a trailing dim of 2 (re, im); a real signal has a trailing 1. The
// transforms are direct O(L^2) sums over a twiddle table indexed by (j * k) mod L, so every
// angle is reduced exactly before the cosine and long transforms keep full double precision.
// An inverse onesided DFT (irfft) rebuilds the full spectrum from its Hermitian half and
// returns the real part with a trailing 1, as the ONNX test data does.
#include <cmath>
#include <complex>
#include <numbers>

#include "ops/kernel_util.h"
#include "ops/nn_ops.h"

namespace kiln::ref::nn {
namespace {

using Complex = std::complex<double>;

// A scalar integer input (rank 0, or one element as some exporters write it).
absl::StatusOr<int64_t> ScalarInt(const Node& node, const KernelInputs& in, size_t i,
                                  const std::string& what) {
  ASSIGN_OR_RETURN(const Tensor* t, RequireInput(node, in, i));
  if (!IsIntegerDType(t->dtype())) return InvalidInput(node, what + " must be an integer");
  if (t->numel() != 1) return InvalidInput(node, what + " must be a scalar");
  return t->GetInt(0);
}

absl::StatusOr<int64_t> PositiveScalar(const Node& node, const KernelInputs& in, size_t i,
                                       const std::string& what) {
  ASSIGN_OR_RETURN(int64_t v, ScalarInt(node, in, i, what));
  if (v <= 0) return InvalidInput(node, what + " must be positive, got " + std::to_string(v));
  return v;
}

// tw[m] = exp(-2 pi i m / L): the forward twiddles; the inverse uses their conjugates.
std::vector<Complex> Twiddles(int64_t len) {
  std::vector<Complex> tw(static_cast<size_t>(len));
  for (int64_t m = 0; m < len; ++m) {
    const double a = -2.0 * std::numbers::pi * static_cast<double>(m) / static_cast<double>(len);
    tw[m] = Complex(std::cos(a), std::sin(a));
  }
  return tw;
}

// out[k] = sum_j in[j] * exp(-+2 pi i j k / L) for k < out.size(), in.size() == L; the
// inverse also divides by L.
void Transform(const std::vector<Complex>& in, const std::vector<Complex>& tw, bool inverse,
               std::vector<Complex>& out) {
  const int64_t len = static_cast<int64_t>(in.size());
  for (size_t k = 0; k < out.size(); ++k) {
    Complex sum(0.0, 0.0);
    for (int64_t j = 0; j < len; ++j) {
      const Complex w = tw[(j * static_cast<int64_t>(k)) % len];
      sum += in[j] * (inverse ? std::conj(w) : w);
    }
    out[k] = inverse ? sum / static_cast<double>(len) : sum;
  }
}

// The DFT's settings after validation against the input shape.
struct DftPlan {
  int64_t axis = 0;
  int64_t len = 0;      // L: the transform length (dft_length or its default)
  int64_t out_len = 0;  // the output's size along axis
  bool inverse = false;
  bool half_in = false;  // inverse onesided: the input holds the spectrum's first half
  int64_t out_c = 2;     // the output's trailing dim: 1 for irfft's real signal
};

// The DFT axis: opset 20 reads it from input 2 (default -2), earlier opsets from the
// attribute (default 1). Negative values count from the back; the trailing (re, im) dim is
// never an axis.
absl::StatusOr<int64_t> DftAxis(const Node& node, const KernelInputs& in, int64_t rank) {
  int64_t axis = node.GetInt("axis", 1);
  if (node.opset >= 20) {
    axis = -2;
    if (in.size() > 2 && in[2]) {
      ASSIGN_OR_RETURN(axis, ScalarInt(node, in, 2, "axis"));
    }
  }
  const int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a > rank - 2) {
    return InvalidInput(
        node, "axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  }
  return a;
}

absl::StatusOr<DftPlan> PlanDft(const Node& node, const KernelInputs& in, const Tensor& x) {
  const int64_t rank = x.rank();
  if (rank < 2 || (x.dim(rank - 1) != 1 && x.dim(rank - 1) != 2)) {
    return InvalidInput(node, "input must be [..., 1] (real) or [..., 2] (complex), got " +
                                  ShapeToString(x.shape()));
  }
  DftPlan p;
  ASSIGN_OR_RETURN(p.axis, DftAxis(node, in, rank));
  p.inverse = node.GetInt("inverse", 0) != 0;
  const bool onesided = node.GetInt("onesided", 0) != 0;
  p.half_in = p.inverse && onesided;
  if (onesided && !p.inverse && x.dim(rank - 1) == 2) {
    return InvalidInput(node, "a onesided forward DFT needs a real input");
  }
  const int64_t n = x.dim(p.axis);
  p.len = p.half_in ? 2 * (n - 1) : n;
  if (in.size() > 1 && in[1]) {
    ASSIGN_OR_RETURN(p.len, PositiveScalar(node, in, 1, "dft_length"));
  }
  if (p.len <= 0) return InvalidInput(node, "the DFT length must be positive");
  p.out_len = onesided && !p.inverse ? p.len / 2 + 1 : p.len;
  p.out_c = p.half_in ? 1 : 2;
  return p;
}

// The input line at complex element `base` (n values along the axis, stride `inner`) as the
// L values the transform reads: truncated or zero-padded, or for irfft the Hermitian
// extension X[L - k] = conj(X[k]) of its first half.
void GatherLine(const std::vector<double>& x, int64_t c, int64_t n, int64_t inner, int64_t base,
                const DftPlan& p, std::vector<Complex>& line) {
  auto at = [&](int64_t j) {
    if (j >= n) return Complex(0.0, 0.0);
    const double* v = x.data() + (base + j * inner) * c;
    return Complex(v[0], c == 2 ? v[1] : 0.0);
  };
  for (int64_t j = 0; j < p.len; ++j) {
    line[j] = !p.half_in || j <= p.len / 2 ? at(j) : std::conj(at(p.len - j));
  }
}

absl::StatusOr<std::vector<Tensor>> Dft(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* x, RequireInput(node, in, 0));
  RETURN_IF_ERROR(CheckFloat(node, *x));
  ASSIGN_OR_RETURN(DftPlan p, PlanDft(node, in, *x));
  std::vector<int64_t> lines(x->shape().begin(), x->shape().end() - 1);
  const AxisSplit s = SplitAtAxis(lines, p.axis);
  std::vector<int64_t> out_shape = x->shape();
  out_shape[p.axis] = p.out_len;
  out_shape.back() = p.out_c;
  ASSIGN_OR_RETURN(int64_t total, CheckedNumel(node, out_shape));
  // The direct sum costs L * out_len per line; past this bound it would run for hours.
  if (p.len > kMaxElements / p.out_len) return InvalidInput(node, "dft_length is too large");
  const std::vector<double> xv = ToDoubles(*x);
  const std::vector<Complex> tw = Twiddles(p.len);
  std::vector<Complex> line(p.len), spec(p.out_len);
  std::vector<double> y(total);
  for (int64_t o = 0; o < s.outer; ++o) {
    for (int64_t i = 0; i < s.inner; ++i) {
      GatherLine(xv, x->dim(x->rank() - 1), s.len, s.inner, o * s.len * s.inner + i, p, line);
      Transform(line, tw, p.inverse, spec);
      for (int64_t k = 0; k < p.out_len; ++k) {
        double* dst = y.data() + ((o * p.out_len + k) * s.inner + i) * p.out_c;
        dst[0] = spec[k].real();
        if (p.out_c == 2) dst[1] = spec[k].imag();
      }
    }
  }
  return std::vector<Tensor>{FromDoubles(x->dtype(), out_shape, y)};
}

// STFT's frame geometry: frame_length comes from the input or the window's length (both
// given must agree), frames = 1 + (signal_length - frame_length) / frame_step.
struct StftPlan {
  int64_t step = 0, frame = 0, frames = 0, bins = 0;
};

absl::StatusOr<StftPlan> PlanStft(const Node& node, const KernelInputs& in, const Tensor& sig) {
  if (sig.rank() != 3 || (sig.dim(2) != 1 && sig.dim(2) != 2)) {
    return InvalidInput(
        node, "signal must be [batch, length, 1 or 2], got " + ShapeToString(sig.shape()));
  }
  StftPlan p;
  ASSIGN_OR_RETURN(p.step, PositiveScalar(node, in, 1, "frame_step"));
  const Tensor* window = in.size() > 2 ? in[2] : nullptr;
  if (window && window->rank() != 1) return InvalidInput(node, "window must be 1-D");
  if (in.size() > 3 && in[3]) {
    ASSIGN_OR_RETURN(p.frame, PositiveScalar(node, in, 3, "frame_length"));
    if (window && window->dim(0) != p.frame) {
      return InvalidInput(node, "window length differs from frame_length");
    }
  } else if (window) {
    p.frame = window->dim(0);
  }
  if (p.frame <= 0) return InvalidInput(node, "needs a non-empty window or a frame_length");
  if (p.frame > sig.dim(1)) return InvalidInput(node, "frame_length exceeds the signal length");
  const bool onesided = node.GetInt("onesided", 1) != 0;
  if (onesided && sig.dim(2) == 2) return InvalidInput(node, "onesided needs a real signal");
  p.frames = 1 + (sig.dim(1) - p.frame) / p.step;
  p.bins = onesided ? p.frame / 2 + 1 : p.frame;
  // Each frame's direct sum costs frame * bins, as in the DFT.
  if (p.frame > kMaxElements / p.bins) return InvalidInput(node, "frame_length is too large");
  return p;
}

absl::StatusOr<std::vector<Tensor>> Stft(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* sig, RequireInput(node, in, 0));
  RETURN_IF_ERROR(CheckFloat(node, *sig));
  ASSIGN_OR_RETURN(StftPlan p, PlanStft(node, in, *sig));
  std::vector<double> window(p.frame, 1.0);  // rectangular when none is given
  if (in.size() > 2 && in[2]) {
    ASSIGN_OR_RETURN(window, FloatInput(node, in, 2, sig));
  }
  const std::vector<int64_t> out_shape{sig->dim(0), p.frames, p.bins, 2};
  ASSIGN_OR_RETURN(int64_t total, CheckedNumel(node, out_shape));
  const int64_t c = sig->dim(2), len = sig->dim(1);
  const std::vector<double> xv = ToDoubles(*sig);
  const std::vector<Complex> tw = Twiddles(p.frame);
  std::vector<Complex> frame(p.frame), spec(p.bins);
  std::vector<double> y(total);
  for (int64_t b = 0; b < sig->dim(0); ++b) {
    for (int64_t f = 0; f < p.frames; ++f) {
      for (int64_t j = 0; j < p.frame; ++j) {
        const double* v = xv.data() + (b * len + f * p.step + j) * c;
        frame[j] = Complex(v[0], c == 2 ? v[1] : 0.0) * window[j];
      }
      Transform(frame, tw, false, spec);
      double* dst = y.data() + (b * p.frames + f) * p.bins * 2;
      for (int64_t k = 0; k < p.bins; ++k) {
        dst[2 * k] = spec[k].real();
        dst[2 * k + 1] = spec[k].imag();
      }
    }
  }
  return std::vector<Tensor>{FromDoubles(sig->dtype(), out_shape, y)};
}

// The output_datatype attribute (default float32) as a numeric dtype.
absl::StatusOr<DType> OutputDType(const Node& node) {
  const int64_t dt = node.GetInt("output_datatype", static_cast<int64_t>(DType::kFloat32));
  if (dt < 0 || dt > 1000 || !IsValidOnnxDType(static_cast<int32_t>(dt))) {
    return InvalidInput(node, "invalid output_datatype " + std::to_string(dt));
  }
  const auto dtype = static_cast<DType>(dt);
  if (!IsFloatDType(dtype) && !IsIntegerDType(dtype)) {
    return InvalidInput(node, "output_datatype must be numeric");
  }
  RETURN_IF_ERROR(CheckSupportedDType(node, dtype));
  return dtype;
}

// The generalized cosine window a0 - a1 cos(2 pi n / N) + a2 cos(4 pi n / N), N = size when
// periodic, size - 1 when symmetric.
absl::StatusOr<std::vector<Tensor>> CosineWindow(const Node& node, const KernelInputs& in,
                                                 double a0, double a1, double a2) {
  ASSIGN_OR_RETURN(int64_t size, PositiveScalar(node, in, 0, "size"));
  ASSIGN_OR_RETURN(DType dtype, OutputDType(node));
  RETURN_IF_ERROR(CheckedNumel(node, {size}).status());
  const bool periodic = node.GetInt("periodic", 1) != 0;
  const int64_t period = periodic ? size : size - 1;
  std::vector<double> w(size, 1.0);  // a one-point symmetric window is 1, as in NumPy/SciPy
  if (period > 0) {
    for (int64_t n = 0; n < size; ++n) {
      const double t = 2.0 * std::numbers::pi * static_cast<double>(n) / period;
      w[n] = a0 - a1 * std::cos(t) + a2 * std::cos(2.0 * t);
    }
  }
  return std::vector<Tensor>{FromDoubles(dtype, {size}, w)};
}

absl::StatusOr<double> ScalarFloat(const Node& node, const KernelInputs& in, size_t i) {
  ASSIGN_OR_RETURN(std::vector<double> v, FloatInput(node, in, i));
  if (v.size() != 1) return InvalidInput(node, "input " + std::to_string(i) + " must be a scalar");
  return v[0];
}

// The spectrogram bin of each of the num_mel_bins + 2 band edges: equally spaced on the mel
// scale over num_mel_bins + 2 steps (as the ONNX reference spaces them), mapped back to hertz
// and floored to a bin of a (dft_length + 1)-point grid.
std::vector<int64_t> MelEdges(int64_t mel_bins, int64_t dft_length, int64_t rate, double lo,
                              double hi) {
  auto mel = [](double hz) { return 2595.0 * std::log10(1.0 + hz / 700.0); };
  const double low = mel(lo), step = (mel(hi) - low) / static_cast<double>(mel_bins + 2);
  std::vector<int64_t> edges(mel_bins + 2);
  for (int64_t i = 0; i < mel_bins + 2; ++i) {
    const double hz = 700.0 * (std::pow(10.0, (low + i * step) / 2595.0) - 1.0);
    // Clamped so that a huge upper edge stays a representable (rejected) bin.
    const double bin = std::floor(static_cast<double>(dft_length + 1) * hz / rate);
    edges[i] = static_cast<int64_t>(std::min(bin, 1e15));
  }
  return edges;
}

absl::StatusOr<std::vector<Tensor>> MelWeightMatrix(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(int64_t mel_bins, PositiveScalar(node, in, 0, "num_mel_bins"));
  ASSIGN_OR_RETURN(int64_t dft_length, PositiveScalar(node, in, 1, "dft_length"));
  ASSIGN_OR_RETURN(int64_t rate, PositiveScalar(node, in, 2, "sample_rate"));
  ASSIGN_OR_RETURN(double lo, ScalarFloat(node, in, 3));
  ASSIGN_OR_RETURN(double hi, ScalarFloat(node, in, 4));
  ASSIGN_OR_RETURN(DType dtype, OutputDType(node));
  const int64_t bins = dft_length / 2 + 1;
  ASSIGN_OR_RETURN(int64_t total, CheckedNumel(node, {bins, mel_bins}));
  // Negation keeps NaN edges out too.
  if (!(lo >= 0.0 && hi > lo && std::isfinite(hi)))
    return InvalidInput(node, "needs 0 <= lower_edge < upper_edge");
  const std::vector<int64_t> e = MelEdges(mel_bins, dft_length, rate, lo, hi);
  // Each band writes bins [left, right), and its centre even when right == centre.
  if (e[mel_bins] >= bins || e[mel_bins + 1] > bins) {
    return InvalidInput(node, "upper_edge_hertz lies past the spectrogram's last bin");
  }
  std::vector<double> w(total, 0.0);
  for (int64_t m = 0; m < mel_bins; ++m) {
    const int64_t left = e[m], centre = e[m + 1], right = e[m + 2];
    for (int64_t j = left; j <= centre; ++j) {
      w[j * mel_bins + m] =
          centre == left ? 1.0 : static_cast<double>(j - left) / static_cast<double>(centre - left);
    }
    for (int64_t j = centre; j < right; ++j) {
      w[j * mel_bins + m] = static_cast<double>(right - j) / static_cast<double>(right - centre);
    }
  }
  return std::vector<Tensor>{FromDoubles(dtype, {bins, mel_bins}, w)};
}

}  // namespace

void RegisterSignalKernels(KernelRegistry& r) {
  r.Register("", "DFT", Dft);
  r.Register("", "STFT", Stft);
  r.Register("", "HannWindow", [](const Node& n, const KernelInputs& in) {
    return CosineWindow(n, in, 0.5, 0.5, 0.0);
  });
  r.Register("", "HammingWindow", [](const Node& n, const KernelInputs& in) {
    return CosineWindow(n, in, 25.0 / 46.0, 21.0 / 46.0, 0.0);
  });
  r.Register("", "BlackmanWindow", [](const Node& n, const KernelInputs& in) {
    return CosineWindow(n, in, 0.42, 0.5, 0.08);
  });
  r.Register("", "MelWeightMatrix", MelWeightMatrix);
}

}  // namespace kiln::ref::nn

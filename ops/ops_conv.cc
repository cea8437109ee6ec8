// Conv and ConvTranspose, accumulating in double. Each output element starts at its bias
// and adds its terms in the order (input channel, kernel tap), on either of two paths with the
// same bits:
// - direct: for every (output channel, input channel, kernel tap) the innermost loop runs
//   over one output row, contiguous in both the input and the output when the stride is 1;
// - as a product (most convolutions): each group's windows are laid out as columns
//   (im2col, padding as zeros) and multiplied by the weights with the reference's register-
//   tiled product (gemm_f64.h), whose sums keep that order. A padded tap adds w * 0, which
//   leaves a sum unchanged unless w is not finite (inf * 0 is NaN): such weights take the
//   direct path, which skips padded taps.
// 1-D and 2-D convolutions are run as 3-D ones with unit leading dims so one loop nest serves
// all ranks.
#include <algorithm>
#include <cmath>

#include "ops/gemm_f64.h"
#include "ops/kernel_util.h"
#include "ops/nn_ops.h"
#include "ops/nn_window.h"

namespace kiln::ref::nn {
namespace {

// For every kernel tap (numbered in (kd, kh, kw) order) and every output row that tap reads
// inside the input: row(tap, in_at, out_at, n), the row's n outputs from plane offset out_at
// reading the input plane from offset in_at with stride g.s[2]. Taps and rows that would read
// only padding are skipped; the caller's plane pointers and the tap's weight are its own.
template <class Row>
void ForEachTapRow(const Win3& g, Row&& row) {
  int64_t tap = 0;
  for (int64_t kd = 0; kd < g.k[0]; ++kd) {
    int64_t bd = kd * g.d[0] - g.pb[0], d_lo, d_hi;
    ValidRange(bd, g.s[0], g.out[0], g.in[0], d_lo, d_hi);
    for (int64_t kh = 0; kh < g.k[1]; ++kh) {
      int64_t bh = kh * g.d[1] - g.pb[1], h_lo, h_hi;
      ValidRange(bh, g.s[1], g.out[1], g.in[1], h_lo, h_hi);
      for (int64_t kw = 0; kw < g.k[2]; ++kw, ++tap) {
        int64_t bw = kw * g.d[2] - g.pb[2], w_lo, w_hi;
        ValidRange(bw, g.s[2], g.out[2], g.in[2], w_lo, w_hi);
        for (int64_t od = d_lo; od < d_hi; ++od) {
          const int64_t id = od * g.s[0] + bd;
          for (int64_t oh = h_lo; oh < h_hi; ++oh) {
            const int64_t ih = oh * g.s[1] + bh;
            row(tap, (id * g.in[1] + ih) * g.in[2] + w_lo * g.s[2] + bw,
                (od * g.out[1] + oh) * g.out[2] + w_lo, w_hi - w_lo);
          }
        }
      }
    }
  }
}

// out (one output channel plane) += in (one input channel plane) correlated with w (one
// k[0] x k[1] x k[2] kernel). W is the weights' own element type (float or double): each
// weight is read as it is used, so widening it here costs nothing, where a double copy of
// every weight tensor per run cost ResNet-50 200 MB of allocation and page faults.
template <class W>
void ConvPlane(const double* in, const W* w, double* out, const Win3& g) {
  const int64_t sw = g.s[2];
  ForEachTapRow(g, [&](int64_t tap, int64_t in_at, int64_t out_at, int64_t n) {
    const double wv = static_cast<double>(w[tap]);
    const double* __restrict irow = in + in_at;
    double* __restrict orow = out + out_at;
    if (sw == 1) {
      for (int64_t j = 0; j < n; ++j) orow[j] += wv * irow[j];
    } else {
      for (int64_t j = 0; j < n; ++j) orow[j] += wv * irow[j * sw];
    }
  });
}

// col[p][pos]: for p over (channel, kd, kh, kw) of one group's `channels` input planes at
// `in`, the input each output position pos reads through that tap, 0 where it reads padding.
void Im2Col(const double* in, int64_t channels, const Win3& g, double* col) {
  const int64_t out_size = g.out_size(), taps = g.k_size(), sw = g.s[2];
  std::fill(col, col + channels * taps * out_size, 0.0);
  for (int64_t c = 0; c < channels; ++c) {
    const double* plane = in + c * g.in_size();
    double* rows = col + c * taps * out_size;
    ForEachTapRow(g, [&](int64_t tap, int64_t in_at, int64_t out_at, int64_t n) {
      const double* __restrict irow = plane + in_at;
      double* __restrict orow = rows + tap * out_size + out_at;
      for (int64_t j = 0; j < n; ++j) orow[j] = irow[j * sw];
    });
  }
}

// One convolution's sizes: batch, input channels, output channels, group and per-group counts.
struct ConvSizes {
  int64_t n_batch, c_in, m_out, group, cg, mg;
};

// Whether the product path pays: enough work per group for the tiled product (not a
// depthwise convolution) and a column buffer of at most 256 MiB. It also needs finite
// weights (checked on their widened copy, which it uses).
bool ProductPays(const ConvSizes& z, const Win3& g) {
  const int64_t taps = z.cg * g.k_size();
  return z.mg >= 4 && taps >= 8 && taps * g.out_size() <= (int64_t{32} << 20);
}

// y[n][m] = bias[m] + (weights x im2col) for every batch row and group.
void ConvAsProduct(const std::vector<double>& x, const std::vector<double>& w,
                   const std::vector<double>& bias, const ConvSizes& z, const Win3& g,
                   std::vector<double>& y) {
  const int64_t taps = z.cg * g.k_size(), out_size = g.out_size();
  std::vector<double> col(static_cast<size_t>(taps * out_size));
  for (int64_t n = 0; n < z.n_batch; ++n) {
    for (int64_t grp = 0; grp < z.group; ++grp) {
      Im2Col(x.data() + (n * z.c_in + grp * z.cg) * g.in_size(), z.cg, g, col.data());
      double* out = y.data() + (n * z.m_out + grp * z.mg) * out_size;
      for (int64_t m = 0; m < z.mg; ++m) {
        std::fill(out + m * out_size, out + (m + 1) * out_size, bias[grp * z.mg + m]);
      }
      GemmF64(w.data() + grp * z.mg * taps, col.data(), out, z.mg, taps, out_size);
    }
  }
}

// The transpose of ConvPlane: scatters one input plane through w into one output plane.
void ScatterPlane(const double* __restrict in, const double* __restrict w, double* __restrict out,
                  const Win3& g) {
  for (int64_t kd = 0; kd < g.k[0]; ++kd) {
    int64_t bd = kd * g.d[0] - g.pb[0], d_lo, d_hi;
    ValidRange(bd, g.s[0], g.in[0], g.out[0], d_lo, d_hi);
    for (int64_t kh = 0; kh < g.k[1]; ++kh) {
      int64_t bh = kh * g.d[1] - g.pb[1], h_lo, h_hi;
      ValidRange(bh, g.s[1], g.in[1], g.out[1], h_lo, h_hi);
      for (int64_t kw = 0; kw < g.k[2]; ++kw) {
        const double wv = *w++;
        int64_t bw = kw * g.d[2] - g.pb[2], w_lo, w_hi;
        ValidRange(bw, g.s[2], g.in[2], g.out[2], w_lo, w_hi);
        const int64_t n = w_hi - w_lo, sw = g.s[2];
        for (int64_t id = d_lo; id < d_hi; ++id) {
          const int64_t od = id * g.s[0] + bd;
          for (int64_t ih = h_lo; ih < h_hi; ++ih) {
            const int64_t oh = ih * g.s[1] + bh;
            const double* irow = in + (id * g.in[1] + ih) * g.in[2] + w_lo;
            double* orow = out + (od * g.out[1] + oh) * g.out[2] + w_lo * sw + bw;
            for (int64_t j = 0; j < n; ++j) orow[j * sw] += wv * irow[j];
          }
        }
      }
    }
  }
}

// Operands shared by Conv and ConvTranspose after validation.
struct ConvArgs {
  const Tensor* x = nullptr;
  const Tensor* w = nullptr;
  const Tensor* b = nullptr;
  int64_t group = 1;
  std::vector<int64_t> x_spatial, w_spatial;
};

absl::StatusOr<ConvArgs> ReadConvArgs(const Node& node, const KernelInputs& in) {
  ConvArgs a;
  ASSIGN_OR_RETURN(a.x, RequireInput(node, in, 0));
  ASSIGN_OR_RETURN(a.w, RequireInput(node, in, 1));
  RETURN_IF_ERROR(CheckFloat(node, *a.x));
  if (a.w->dtype() != a.x->dtype()) return InvalidInput(node, "X and W dtypes differ");
  if (a.x->rank() < 3 || a.w->rank() != a.x->rank()) {
    return InvalidInput(node, "X " + ShapeToString(a.x->shape()) + " and W " +
                                  ShapeToString(a.w->shape()) + " must have the same rank >= 3");
  }
  a.group = node.GetInt("group", 1);
  if (a.group < 1 || a.group > (1 << 24)) return InvalidInput(node, "group is out of range");
  a.x_spatial.assign(a.x->shape().begin() + 2, a.x->shape().end());
  a.w_spatial.assign(a.w->shape().begin() + 2, a.w->shape().end());
  a.b = in.size() > 2 ? in[2] : nullptr;
  if (a.b && a.b->dtype() != a.x->dtype()) return InvalidInput(node, "B dtype differs from X");
  return a;
}

std::vector<double> BiasOrZeros(const Tensor* b, int64_t m) {
  return b ? ToDoubles(*b) : std::vector<double>(static_cast<size_t>(m), 0.0);
}

absl::StatusOr<std::vector<Tensor>> Conv(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(ConvArgs a, ReadConvArgs(node, in));
  const int64_t n_batch = a.x->dim(0), c_in = a.x->dim(1), m_out = a.w->dim(0);
  if (c_in % a.group != 0 || m_out % a.group != 0 || a.w->dim(1) * a.group != c_in) {
    return InvalidInput(node, "group " + std::to_string(a.group) + " does not fit X channels " +
                                  std::to_string(c_in) + " and W " + ShapeToString(a.w->shape()));
  }
  if (a.b && a.b->numel() != m_out) return InvalidInput(node, "B must have M elements");
  ASSIGN_OR_RETURN(std::vector<int64_t> kernel,
                   KernelShape(node, a.x_spatial.size(), &a.w_spatial));
  ASSIGN_OR_RETURN(Window win, ConvWindow(node, a.x_spatial, kernel));
  ASSIGN_OR_RETURN(Win3 g, To3D(node, win));
  std::vector<int64_t> out_shape{n_batch, m_out};
  out_shape.insert(out_shape.end(), win.out.begin(), win.out.end());
  RETURN_IF_ERROR(CheckedNumel(node, out_shape).status());

  const std::vector<double> x = ToDoubles(*a.x);
  const std::vector<double> bias = BiasOrZeros(a.b, m_out);
  std::vector<double> y(static_cast<size_t>(n_batch * m_out * g.out_size()));
  const ConvSizes z{n_batch, c_in, m_out, a.group, c_in / a.group, m_out / a.group};
  if (ProductPays(z, g)) {
    const std::vector<double> w = ToDoubles(*a.w);
    if (std::all_of(w.begin(), w.end(), [](double v) { return std::isfinite(v); })) {
      ConvAsProduct(x, w, bias, z, g, y);
      return std::vector<Tensor>{FromDoubles(a.x->dtype(), out_shape, y)};
    }
  }
  // float weights are read as they are; other types widen once.
  std::vector<double> w_wide;
  const float* w_float = a.w->dtype() == DType::kFloat32 ? a.w->data<float>() : nullptr;
  if (!w_float) w_wide = ToDoubles(*a.w);
  const int64_t cg = c_in / a.group, mg = m_out / a.group;
  // Output planes are independent (each sums its terms in the serial order, so the result
  // does not depend on the team): large convolutions use every core, which is most of what a
  // warm-up check of a CNN against this interpreter costs.
  const bool big = n_batch * m_out * cg * g.k_size() * g.out_size() >= (int64_t{1} << 20);
#pragma omp parallel for collapse(2) schedule(dynamic, 4) if (big)
  for (int64_t n = 0; n < n_batch; ++n) {
    for (int64_t m = 0; m < m_out; ++m) {
      double* out = y.data() + (n * m_out + m) * g.out_size();
      std::fill(out, out + g.out_size(), bias[m]);
      const int64_t c0 = (m / mg) * cg;
      for (int64_t c = 0; c < cg; ++c) {
        const double* in_plane = x.data() + (n * c_in + c0 + c) * g.in_size();
        const int64_t w_at = (m * cg + c) * g.k_size();
        if (w_float) {
          ConvPlane(in_plane, w_float + w_at, out, g);
        } else {
          ConvPlane(in_plane, w_wide.data() + w_at, out, g);
        }
      }
    }
  }
  return std::vector<Tensor>{FromDoubles(a.x->dtype(), out_shape, y)};
}

absl::StatusOr<std::vector<Tensor>> ConvTranspose(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(ConvArgs a, ReadConvArgs(node, in));
  const int64_t n_batch = a.x->dim(0), c_in = a.x->dim(1);
  if (a.w->dim(0) != c_in || c_in % a.group != 0) {
    return InvalidInput(node, "W " + ShapeToString(a.w->shape()) + " and group " +
                                  std::to_string(a.group) + " do not fit X channels " +
                                  std::to_string(c_in));
  }
  const int64_t m_out = a.w->dim(1) * a.group;
  if (a.b && a.b->numel() != m_out) return InvalidInput(node, "B must have M elements");
  ASSIGN_OR_RETURN(std::vector<int64_t> kernel,
                   KernelShape(node, a.x_spatial.size(), &a.w_spatial));
  ASSIGN_OR_RETURN(Window win, ConvTransposeWindow(node, a.x_spatial, kernel));
  ASSIGN_OR_RETURN(Win3 g, To3D(node, win));
  std::vector<int64_t> out_shape{n_batch, m_out};
  out_shape.insert(out_shape.end(), win.out.begin(), win.out.end());
  RETURN_IF_ERROR(CheckedNumel(node, out_shape).status());

  const std::vector<double> x = ToDoubles(*a.x), w = ToDoubles(*a.w);
  const std::vector<double> bias = BiasOrZeros(a.b, m_out);
  std::vector<double> y(static_cast<size_t>(n_batch * m_out * g.out_size()));
  const int64_t cg = c_in / a.group, mg = a.w->dim(1);
  for (int64_t n = 0; n < n_batch; ++n) {
    for (int64_t m = 0; m < m_out; ++m) {
      double* out = y.data() + (n * m_out + m) * g.out_size();
      std::fill(out, out + g.out_size(), bias[m]);
      const int64_t grp = m / mg, oc = m % mg;
      for (int64_t c = grp * cg; c < (grp + 1) * cg; ++c) {
        ScatterPlane(x.data() + (n * c_in + c) * g.in_size(), w.data() + (c * mg + oc) * g.k_size(),
                     out, g);
      }
    }
  }
  return std::vector<Tensor>{FromDoubles(a.x->dtype(), out_shape, y)};
}

}  // namespace

void RegisterConvKernels(KernelRegistry& r) {
  r.Register("", "Conv", Conv);
  r.Register("", "ConvTranspose", ConvTranspose);
}

}  // namespace kiln::ref::nn

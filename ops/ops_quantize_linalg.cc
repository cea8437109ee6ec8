// Integer and quantized products: MatMulInteger, ConvInteger (int32 results of the products
// of zero-point-shifted operands), QLinearMatMul and QLinearConv (the same products,
// requantized: y = saturate(round_half_even(acc * a_scale * b_scale / y_scale) + y_zero_point),
// the multiplier rounded to the scales' dtype at each step as ONNX's NumPy definition does).
//
// The products run through the float64 MatMul and Conv reference kernels: the shifted
// operands and every partial sum are integers far below 2^53, so double arithmetic is exact,
// and the window and broadcast rules are the float operators' own.
#include <cmath>

#include "ops/nn_ops.h"
#include "ops/quantize_util.h"

namespace kiln::ref {
namespace {

bool IsByteInt(DType t) { return t == DType::kInt8 || t == DType::kUInt8; }

// x - zero_point as a float64 tensor. The zero point is a scalar (numel 1), or one value per
// slice along `axis` of x (per-row A, per-column B, per-output-channel W).
absl::StatusOr<Tensor> Shifted(const Node& node, const Tensor& x, const Tensor* zp, int64_t axis) {
  if (!IsByteInt(x.dtype())) {
    return Unsupported(node, "dtype " + DTypeName(x.dtype()) + " is not int8 or uint8");
  }
  if (zp && zp->dtype() != x.dtype()) {
    return InvalidInput(node, "zero point must match its operand's dtype");
  }
  std::vector<int64_t> idx(x.numel(), 0);
  if (zp && zp->numel() != 1) {
    const int64_t a = axis < 0 ? axis + x.rank() : axis;
    if (a < 0 || a >= x.rank() || zp->numel() != x.dim(a)) {
      return InvalidInput(node, "zero point " + ShapeToString(zp->shape()) + " does not fit " +
                                    ShapeToString(x.shape()));
    }
    const int64_t stride = Strides(x.shape())[a];
    for (int64_t i = 0; i < x.numel(); ++i) idx[i] = i / stride % x.dim(a);
  }
  Tensor out(DType::kFloat64, x.shape());
  double* po = out.mutable_data<double>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    po[i] = x.GetDouble(i) - (zp ? zp->GetDouble(idx[i]) : 0.0);
  }
  return out;
}

const Tensor* Opt(const KernelInputs& in, size_t i) { return i < in.size() ? in[i] : nullptr; }

// Runs a float kernel of the registry (MatMul, Conv) on float64 operands.
absl::StatusOr<Tensor> RunFloatKernel(const Node& node, const char* op, KernelInputs in) {
  const KernelFn* fn = KernelRegistry::Default().Find("", op);
  if (!fn) return absl::InternalError(std::string(op) + " kernel is missing");
  ASSIGN_OR_RETURN(std::vector<Tensor> outs, (*fn)(node, in));
  return outs[0];
}

Tensor ToInt32(const Tensor& acc) {
  Tensor y(DType::kInt32, acc.shape());
  for (int64_t i = 0; i < acc.numel(); ++i) y.SetInt(i, static_cast<int64_t>(acc.GetDouble(i)));
  return y;
}

absl::StatusOr<std::vector<Tensor>> MatMulInteger(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* a, RequireInput(node, in, 0));
  ASSIGN_OR_RETURN(const Tensor* b, RequireInput(node, in, 1));
  ASSIGN_OR_RETURN(Tensor sa, Shifted(node, *a, Opt(in, 2), -2));
  ASSIGN_OR_RETURN(Tensor sb, Shifted(node, *b, Opt(in, 3), -1));
  ASSIGN_OR_RETURN(Tensor acc, RunFloatKernel(node, "MatMul", {&sa, &sb}));
  return std::vector<Tensor>{ToInt32(acc)};
}

absl::StatusOr<std::vector<Tensor>> ConvInteger(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* x, RequireInput(node, in, 0));
  ASSIGN_OR_RETURN(const Tensor* w, RequireInput(node, in, 1));
  const Tensor* xzp = Opt(in, 2);
  if (xzp && xzp->numel() != 1) return InvalidInput(node, "x_zero_point must be a scalar");
  ASSIGN_OR_RETURN(Tensor sx, Shifted(node, *x, xzp, 0));
  ASSIGN_OR_RETURN(Tensor sw, Shifted(node, *w, Opt(in, 3), 0));
  ASSIGN_OR_RETURN(Tensor acc, RunFloatKernel(node, "Conv", {&sx, &sw}));
  return std::vector<Tensor>{ToInt32(acc)};
}

// The requantization multiplier a_scale[i] * b_scale[j] / y_scale in the scales' dtype.
struct Requant {
  std::vector<double> a, b;
  double y = 1.0, zero = 0.0;
  DType dtype = DType::kFloat32;
  double At(int64_t i, int64_t j) const {
    const double ab = quant::RoundTo(dtype, a[a.size() == 1 ? 0 : i] * b[b.size() == 1 ? 0 : j]);
    return quant::RoundTo(dtype, ab / y);
  }
};

absl::StatusOr<Requant> ReadRequant(const Node& node, const Tensor& as, const Tensor& bs,
                                    const Tensor& ys, const Tensor* yzp) {
  for (const Tensor* s : {&as, &bs, &ys}) RETURN_IF_ERROR(nn::CheckFloat(node, *s));
  if (bs.dtype() != as.dtype() || ys.dtype() != as.dtype()) {
    return InvalidInput(node, "scales must share one dtype");
  }
  if (ys.numel() != 1 || (yzp && yzp->numel() != 1)) {
    return InvalidInput(node, "y_scale and y_zero_point must be scalars");
  }
  Requant r{nn::ToDoubles(as), nn::ToDoubles(bs), ys.GetDouble(0), yzp ? yzp->GetDouble(0) : 0.0,
            as.dtype()};
  return r;
}

// y = saturate(rint(acc * multiplier) + zero) into `dtype`; i/j pick the row/column scales.
Tensor Requantize(const Tensor& acc, const Requant& rq, DType dtype, int64_t rows_axis_len,
                  int64_t cols_stride, int64_t cols_len) {
  Tensor y(dtype, acc.shape());
  for (int64_t k = 0; k < acc.numel(); ++k) {
    const int64_t j = k / cols_stride % cols_len;
    const int64_t i = rows_axis_len > 0 ? k / (cols_stride * cols_len) % rows_axis_len : 0;
    y.SetInt(k,
             quant::SaturateRound(dtype, std::nearbyint(acc.GetDouble(k) * rq.At(i, j)) + rq.zero));
  }
  return y;
}

absl::StatusOr<std::vector<Tensor>> QLinearMatMul(const Node& node, const KernelInputs& in) {
  for (size_t i : {0, 1, 3, 4, 6}) RETURN_IF_ERROR(RequireInput(node, in, i).status());
  const Tensor* yzp = Opt(in, 7);
  ASSIGN_OR_RETURN(Requant rq, ReadRequant(node, *in[1], *in[4], *in[6], yzp));
  ASSIGN_OR_RETURN(Tensor sa, Shifted(node, *in[0], Opt(in, 2), -2));
  ASSIGN_OR_RETURN(Tensor sb, Shifted(node, *in[3], Opt(in, 5), -1));
  ASSIGN_OR_RETURN(Tensor acc, RunFloatKernel(node, "MatMul", {&sa, &sb}));
  const int64_t n = acc.rank() > 0 ? acc.dim(acc.rank() - 1) : 1;
  const int64_t m = acc.rank() > 1 ? acc.dim(acc.rank() - 2) : 1;
  if ((rq.a.size() != 1 && static_cast<int64_t>(rq.a.size()) != m) ||
      (rq.b.size() != 1 && static_cast<int64_t>(rq.b.size()) != n)) {
    return InvalidInput(node, "a_scale must be per tensor or per row, b_scale per column");
  }
  const DType out = yzp ? yzp->dtype() : in[0]->dtype();
  return std::vector<Tensor>{Requantize(acc, rq, out, m, 1, n)};
}

absl::StatusOr<std::vector<Tensor>> QLinearConv(const Node& node, const KernelInputs& in) {
  for (size_t i : {0, 1, 3, 4, 6}) RETURN_IF_ERROR(RequireInput(node, in, i).status());
  const Tensor* yzp = Opt(in, 7);
  ASSIGN_OR_RETURN(Requant rq, ReadRequant(node, *in[1], *in[4], *in[6], yzp));
  const Tensor* xzp = Opt(in, 2);
  if (rq.a.size() != 1 || (xzp && xzp->numel() != 1)) {
    return InvalidInput(node, "x_scale and x_zero_point must be scalars");
  }
  ASSIGN_OR_RETURN(Tensor sx, Shifted(node, *in[0], xzp, 0));
  ASSIGN_OR_RETURN(Tensor sw, Shifted(node, *in[3], Opt(in, 5), 0));
  Tensor bias;
  if (const Tensor* b = Opt(in, 8)) {
    if (b->dtype() != DType::kInt32) return InvalidInput(node, "B must be int32");
    bias = Tensor(DType::kFloat64, b->shape());
    for (int64_t i = 0; i < b->numel(); ++i) bias.SetDouble(i, b->GetDouble(i));
  }
  KernelInputs conv_in{&sx, &sw};
  if (bias.defined()) conv_in.push_back(&bias);
  ASSIGN_OR_RETURN(Tensor acc, RunFloatKernel(node, "Conv", conv_in));
  const int64_t m = acc.dim(1);
  const int64_t spatial = acc.numel() == 0 ? 1 : acc.numel() / (acc.dim(0) * m);
  if (rq.b.size() != 1 && static_cast<int64_t>(rq.b.size()) != m) {
    return InvalidInput(node, "w_scale must be a scalar or one value per output channel");
  }
  const DType out = yzp ? yzp->dtype() : in[0]->dtype();
  return std::vector<Tensor>{Requantize(acc, rq, out, 0, spatial, m)};
}

}  // namespace

void RegisterQuantizedLinalgKernels(KernelRegistry& r) {
  r.Register("", "MatMulInteger", MatMulInteger);
  r.Register("", "ConvInteger", ConvInteger);
  r.Register("", "QLinearMatMul", QLinearMatMul);
  r.Register("", "QLinearConv", QLinearConv);
}

}  // namespace kiln::ref

// The inverses of windowed gathers: MaxUnpool (values written back at MaxPool's flat indices,
// zeros elsewhere) and Col2Im (column blocks summed back into an image, overlaps adding up).
//
// MaxUnpool's indices address the natural unpooled shape, (in - 1) * stride + kernel - pads
// per spatial dim; an explicit output_shape only pads that result at the end of each dim,
// as ONNX's test data expects. Col2Im's block grid is Conv's window over image_shape with
// block_shape as the kernel, so the two operators share their attribute checks.
#include "ops/kernel_util.h"
#include "ops/nn_ops.h"
#include "ops/nn_window.h"
#include "ops/tensor_ops.h"

namespace kiln::ref::nn {

absl::StatusOr<std::vector<int64_t>> MaxUnpoolSpatial(const Node& node,
                                                      const std::vector<int64_t>& in) {
  const size_t r = in.size();
  const std::vector<int64_t> k = node.GetInts("kernel_shape");
  const std::vector<int64_t> s = node.GetInts("strides", std::vector<int64_t>(r, 1));
  const std::vector<int64_t> p = node.GetInts("pads", std::vector<int64_t>(2 * r, 0));
  if (k.size() != r || s.size() != r || p.size() != 2 * r) {
    return InvalidInput(node, "kernel_shape, strides and pads must fit the spatial rank");
  }
  std::vector<int64_t> out(r);
  for (size_t d = 0; d < r; ++d) {
    if (k[d] <= 0 || s[d] <= 0 || p[d] < 0 || p[d + r] < 0 || k[d] > (1 << 20) ||
        s[d] > (1 << 20)) {
      return InvalidInput(node, "kernel_shape, strides and pads are out of range");
    }
    out[d] = (in[d] - 1) * s[d] + k[d] - p[d] - p[d + r];
    if (out[d] < 0) return InvalidInput(node, "pads exceed the unpooled size");
  }
  return out;
}

namespace {

// The unpooled tensor at its natural shape: y.flat[I] = X.
absl::StatusOr<Tensor> Unpool(const Node& node, const Tensor& x, const Tensor& idx) {
  std::vector<int64_t> spatial(x.shape().begin() + 2, x.shape().end());
  ASSIGN_OR_RETURN(std::vector<int64_t> out, MaxUnpoolSpatial(node, spatial));
  out.insert(out.begin(), {x.dim(0), x.dim(1)});
  RETURN_IF_ERROR(CheckOutputShape(node, out));
  Tensor y(x.dtype(), out);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t j = idx.GetInt(i);
    if (j < 0 || j >= y.numel())
      return InvalidInput(node, "index " + std::to_string(j) + " out of range");
    CopyElement(x, i, y, j);
  }
  return y;
}

absl::StatusOr<std::vector<Tensor>> MaxUnpool(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* x, RequireInput(node, in, 0));
  ASSIGN_OR_RETURN(const Tensor* idx, RequireInput(node, in, 1));
  RETURN_IF_ERROR(CheckFloat(node, *x));
  if (x->rank() < 3 || idx->shape() != x->shape() || idx->dtype() != DType::kInt64) {
    return InvalidInput(node, "X must be (N, C, ...) and I int64 of X's shape");
  }
  ASSIGN_OR_RETURN(Tensor y, Unpool(node, *x, *idx));
  if (in.size() < 3 || !in[2]) return std::vector<Tensor>{std::move(y)};
  ASSIGN_OR_RETURN(std::vector<int64_t> shape, ReadInts(node, *in[2], "output_shape"));
  if (shape.size() != static_cast<size_t>(y.rank())) return InvalidInput(node, "output_shape rank");
  for (int64_t d = 0; d < y.rank(); ++d) {
    if (shape[d] < y.dim(d)) return InvalidInput(node, "output_shape is below the unpooled size");
  }
  ASSIGN_OR_RETURN(Tensor padded,
                   GatherElements(node, y, shape, [&](const std::vector<int64_t>& c) {
                     int64_t flat = 0;
                     for (size_t d = 0; d < c.size(); ++d) {
                       if (c[d] >= y.dim(d)) return int64_t{-1};
                       flat = flat * y.dim(d) + c[d];
                     }
                     return flat;
                   }));
  return std::vector<Tensor>{std::move(padded)};
}

absl::StatusOr<std::vector<Tensor>> Col2Im(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* x, RequireInput(node, in, 0));
  ASSIGN_OR_RETURN(const Tensor* image_t, RequireInput(node, in, 1));
  ASSIGN_OR_RETURN(const Tensor* block_t, RequireInput(node, in, 2));
  RETURN_IF_ERROR(CheckFloat(node, *x));
  ASSIGN_OR_RETURN(std::vector<int64_t> image, ReadInts(node, *image_t, "image_shape"));
  ASSIGN_OR_RETURN(std::vector<int64_t> block, ReadInts(node, *block_t, "block_shape"));
  if (image.empty() || image.size() != block.size() || x->rank() != 3) {
    return InvalidInput(node, "input must be (N, C * prod(block), L) with matching shapes");
  }
  ASSIGN_OR_RETURN(Window w, ConvWindow(node, image, block));
  const int64_t k = NumElements(block), blocks = NumElements(w.out);
  if (k == 0 || x->dim(1) % k != 0 || x->dim(2) != blocks) {
    return InvalidInput(node, "input " + ShapeToString(x->shape()) + " does not fit " +
                                  std::to_string(k) + " block elements and " +
                                  std::to_string(blocks) + " blocks");
  }
  const int64_t n = x->dim(0), c = x->dim(1) / k, pixels = NumElements(image);
  std::vector<int64_t> out_shape{n, c};
  out_shape.insert(out_shape.end(), image.begin(), image.end());
  RETURN_IF_ERROR(CheckOutputShape(node, out_shape));
  const std::vector<double> v = ToDoubles(*x);
  std::vector<double> y(n * c * pixels, 0.0);
  const std::vector<int64_t> kstr = Strides(block), bstr = Strides(w.out), istr = Strides(image);
  for (int64_t kk = 0; kk < k; ++kk) {
    for (int64_t b = 0; b < blocks; ++b) {
      int64_t pix = 0;
      for (size_t d = 0; d < image.size() && pix >= 0; ++d) {
        const int64_t pos = b / bstr[d] % w.out[d] * w.strides[d] - w.pad_begin[d] +
                            kk / kstr[d] % block[d] * w.dilations[d];
        pix = pos < 0 || pos >= image[d] ? -1 : pix + pos * istr[d];
      }
      if (pix < 0) continue;
      for (int64_t nc = 0; nc < n * c; ++nc) {
        y[nc * pixels + pix] += v[(nc * k + kk) * blocks + b];
      }
    }
  }
  return std::vector<Tensor>{FromDoubles(x->dtype(), out_shape, y)};
}

}  // namespace

void RegisterUnpoolKernels(KernelRegistry& r) {
  r.Register("", "MaxUnpool", MaxUnpool);
  r.Register("", "Col2Im", Col2Im);
}

}  // namespace kiln::ref::nn

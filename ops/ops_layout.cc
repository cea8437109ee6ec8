// Reference kernels that move elements between layouts: Transpose, Concat, Split, Slice,
// Pad, DepthToSpace, SpaceToDepth. All are dtype-agnostic (raw element copies).
#include <algorithm>
#include <cstring>
#include <numeric>

#include "ops/pad_source.h"
#include "ops/tensor_ops.h"

namespace kiln::ref {
namespace {

using Outs = absl::StatusOr<std::vector<Tensor>>;

// y = x with its dims permuted, elements moved as words of their size: an odometer over
// y's outer dims walks x with x's strides in y's dim order, y's last dim an inner loop.
// GatherElements' per-element callback cost ~20 ns an element, and folding the transposed
// weights of a large transformer (ConvNeXt-L: ~200M) spent seconds per compile there.
template <class W>
void PermutedCopy(const W* x, W* y, const std::vector<int64_t>& out,
                  const std::vector<int64_t>& from_strides) {
  const int64_t rank = static_cast<int64_t>(out.size());
  // A swap of the last two dims (x's contiguous dim is y's second to last) goes in 16 x 16
  // tiles, so both sides are read and written in runs of 16 (a 1536 x 384 weight read
  // column by column misses the cache on every element).
  const bool tiled = rank >= 2 && from_strides[rank - 2] == 1 && from_strides[rank - 1] != 1;
  const int64_t inner = tiled ? out[rank - 2] * out[rank - 1] : out[rank - 1];
  const int64_t outer_rank = tiled ? rank - 2 : rank - 1;
  const int64_t rows = NumElements(out) / inner;
  std::vector<int64_t> index(rank, 0);
  int64_t offset = 0;
  for (int64_t r = 0; r < rows; ++r, y += inner) {
    const W* src = x + offset;
    if (tiled) {
      const int64_t m = out[rank - 2], n = out[rank - 1], step = from_strides[rank - 1];
      constexpr int64_t kTile = 16;
      for (int64_t i0 = 0; i0 < m; i0 += kTile) {
        for (int64_t j0 = 0; j0 < n; j0 += kTile) {
          for (int64_t j = j0; j < std::min(n, j0 + kTile); ++j) {
            for (int64_t i = i0; i < std::min(m, i0 + kTile); ++i) y[i * n + j] = src[i + j * step];
          }
        }
      }
    } else {
      const int64_t step = from_strides[rank - 1];
      for (int64_t j = 0; j < inner; ++j) y[j] = src[j * step];
    }
    for (int64_t d = outer_rank - 1; d >= 0; --d) {
      offset += from_strides[d];
      if (++index[d] < out[d]) break;
      offset -= from_strides[d] * out[d];
      index[d] = 0;
    }
  }
}

// The permuted copy for word-sized element types; false for the others (strings).
bool TryPermutedCopy(const Tensor& x, Tensor& y, const std::vector<int64_t>& from_strides) {
  if (y.numel() == 0 || y.rank() == 0) return false;
  switch (DTypeSize(x.dtype())) {
    case 1:
      PermutedCopy(x.data<uint8_t>(), y.mutable_data<uint8_t>(), y.shape(), from_strides);
      return true;
    case 2:
      PermutedCopy(x.data<uint16_t>(), y.mutable_data<uint16_t>(), y.shape(), from_strides);
      return true;
    case 4:
      PermutedCopy(x.data<uint32_t>(), y.mutable_data<uint32_t>(), y.shape(), from_strides);
      return true;
    case 8:
      PermutedCopy(x.data<uint64_t>(), y.mutable_data<uint64_t>(), y.shape(), from_strides);
      return true;
    default:
      return false;
  }
}

Outs TransposeKernel(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* x, RequireInput(node, in, 0));
  RETURN_IF_ERROR(CheckMovableDType(node, *x));
  const int64_t rank = x->rank();
  std::vector<int64_t> perm(rank);
  std::iota(perm.rbegin(), perm.rend(), 0);  // default: reverse the dims
  if (node.HasAttr("perm")) perm = node.GetInts("perm");
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < static_cast<int64_t>(sorted.size()); ++i) {
    if (static_cast<int64_t>(sorted.size()) != rank || sorted[i] != i) {
      return InvalidInput(node, "perm is not a permutation of the input dims");
    }
  }
  std::vector<int64_t> out(rank);
  for (int64_t i = 0; i < rank; ++i) out[i] = x->dim(perm[i]);
  std::vector<int64_t> strides = Strides(x->shape());
  std::vector<int64_t> from(rank);
  for (int64_t i = 0; i < rank; ++i) from[i] = strides[perm[i]];
  if (x->dtype() != DType::kString) {
    Tensor fast = Tensor::Uninitialized(x->dtype(), out);
    if (TryPermutedCopy(*x, fast, from)) return std::vector<Tensor>{std::move(fast)};
  }
  ASSIGN_OR_RETURN(Tensor y, GatherElements(node, *x, out, [&](const std::vector<int64_t>& c) {
                     int64_t s = 0;
                     for (int64_t i = 0; i < rank; ++i) s += c[i] * strides[perm[i]];
                     return s;
                   }));
  return std::vector<Tensor>{y};
}

// Bytes in one slab at and after `axis` (dims [axis, rank)) and the count of slabs before it.
int64_t OuterCount(const std::vector<int64_t>& shape, int64_t axis) {
  int64_t n = 1;
  for (int64_t i = 0; i < axis; ++i) n *= shape[i];
  return n;
}
int64_t InnerCount(const std::vector<int64_t>& shape, int64_t axis) {
  int64_t n = 1;
  for (size_t i = axis + 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

Outs ConcatKernel(const Node& node, const KernelInputs& in) {
  std::vector<const Tensor*> xs;
  for (const Tensor* t : in) {
    if (t) xs.push_back(t);
  }
  if (xs.empty()) return InvalidInput(node, "Concat needs at least one input");
  RETURN_IF_ERROR(CheckMovableDType(node, *xs[0]));
  const int64_t rank = xs[0]->rank();
  ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(node, node.GetInt("axis", 0), rank));
  if (rank == 0) return InvalidInput(node, "cannot concatenate scalars");
  std::vector<int64_t> out = xs[0]->shape();
  out[axis] = 0;
  for (const Tensor* t : xs) {
    bool same = t->dtype() == xs[0]->dtype() && t->rank() == rank;
    for (int64_t i = 0; same && i < rank; ++i) same = i == axis || t->dim(i) == out[i];
    if (!same) return InvalidInput(node, "inputs differ in dtype, rank or non-axis dims");
    out[axis] += t->dim(axis);
  }
  RETURN_IF_ERROR(CheckOutputShape(node, out));
  Tensor y(xs[0]->dtype(), out);
  const size_t es = DTypeSize(y.dtype());
  const int64_t outer = OuterCount(out, axis);
  const int64_t inner = InnerCount(out, axis);
  char* dst = static_cast<char*>(y.raw_mutable());
  for (int64_t o = 0; o < outer; ++o) {
    for (const Tensor* t : xs) {
      const size_t chunk = static_cast<size_t>(t->dim(axis) * inner) * es;
      if (chunk == 0) continue;
      std::memcpy(dst, static_cast<const char*>(t->raw()) + o * chunk, chunk);
      dst += chunk;
    }
  }
  return std::vector<Tensor>{y};
}

// Split sizes from the `split` input, the num_outputs attribute (last chunk smaller), or an
// even split into as many parts as the node has outputs.
absl::StatusOr<std::vector<int64_t>> SplitSizes(const Node& node, const KernelInputs& in,
                                                int64_t dim) {
  const int64_t n = static_cast<int64_t>(node.outputs.size());
  std::vector<int64_t> sizes;
  if (in.size() > 1 && in[1]) {
    ASSIGN_OR_RETURN(sizes, ReadInts(node, *in[1], "split"));
    int64_t sum = 0;
    for (int64_t s : sizes) {
      if (s < 0 || s > dim) return InvalidInput(node, "split size out of range");
      sum += s;
    }
    if (sum != dim || static_cast<int64_t>(sizes.size()) != n) {
      return InvalidInput(node, "split sizes must sum to the axis size and match the outputs");
    }
    return sizes;
  }
  if (node.HasAttr("num_outputs")) {
    int64_t parts = node.GetInt("num_outputs", n);
    if (parts != n || parts <= 0) return InvalidInput(node, "num_outputs must match the outputs");
    const int64_t chunk = (dim + parts - 1) / parts;
    for (int64_t i = 0, left = dim; i < parts; ++i, left -= std::min(left, chunk)) {
      sizes.push_back(std::min(left, chunk));
    }
    return sizes;
  }
  if (n <= 0 || dim % n != 0) {
    return InvalidInput(node, "axis size " + std::to_string(dim) + " does not split evenly into " +
                                  std::to_string(n) + " outputs");
  }
  return std::vector<int64_t>(n, dim / n);
}

Outs SplitKernel(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* x, RequireInput(node, in, 0));
  RETURN_IF_ERROR(CheckMovableDType(node, *x));
  ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(node, node.GetInt("axis", 0), x->rank()));
  if (x->rank() == 0) return InvalidInput(node, "cannot split a scalar");
  ASSIGN_OR_RETURN(std::vector<int64_t> sizes, SplitSizes(node, in, x->dim(axis)));
  const size_t es = DTypeSize(x->dtype());
  const int64_t outer = OuterCount(x->shape(), axis);
  const int64_t inner = InnerCount(x->shape(), axis);
  const size_t row = static_cast<size_t>(x->dim(axis) * inner) * es;
  std::vector<Tensor> outs;
  int64_t offset = 0;
  for (int64_t size : sizes) {
    std::vector<int64_t> shape = x->shape();
    shape[axis] = size;
    Tensor y(x->dtype(), shape);
    const size_t chunk = static_cast<size_t>(size * inner) * es;
    for (int64_t o = 0; o < outer && chunk > 0; ++o) {
      std::memcpy(static_cast<char*>(y.raw_mutable()) + o * chunk,
                  static_cast<const char*>(x->raw()) + o * row + offset * inner * es, chunk);
    }
    offset += size;
    outs.push_back(std::move(y));
  }
  return outs;
}

struct SliceAxis {
  int64_t start = 0, step = 1, count = 0;
};

// Clamps one axis's start/end as the Slice spec describes for positive and negative steps.
SliceAxis ClampSlice(int64_t start, int64_t end, int64_t step, int64_t dim) {
  // Any |step| beyond the dim takes at most one element, like dim + 1; clamping keeps
  // -step and the rounding below from overflowing on INT64_MIN/MAX.
  step = std::clamp<int64_t>(step, -(dim + 1), dim + 1);
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  SliceAxis s;
  s.step = step;
  if (step > 0) {
    s.start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
    s.count = end > s.start ? (end - s.start + step - 1) / step : 0;
  } else {
    s.start = std::clamp<int64_t>(start, 0, dim - 1);
    end = std::clamp<int64_t>(end, -1, dim - 1);
    s.count = s.start > end ? (s.start - end + (-step) - 1) / (-step) : 0;
  }
  return s;
}

absl::StatusOr<std::vector<int64_t>> OptionalInts(const Node& node, const KernelInputs& in,
                                                  size_t i, const char* what) {
  if (i >= in.size() || !in[i]) return std::vector<int64_t>{};
  return ReadInts(node, *in[i], what);
}

Outs SliceKernel(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* x, RequireInput(node, in, 0));
  ASSIGN_OR_RETURN(const Tensor* st, RequireInput(node, in, 1));
  ASSIGN_OR_RETURN(const Tensor* en, RequireInput(node, in, 2));
  RETURN_IF_ERROR(CheckMovableDType(node, *x));
  ASSIGN_OR_RETURN(std::vector<int64_t> starts, ReadInts(node, *st, "starts"));
  ASSIGN_OR_RETURN(std::vector<int64_t> ends, ReadInts(node, *en, "ends"));
  ASSIGN_OR_RETURN(std::vector<int64_t> axes, OptionalInts(node, in, 3, "axes"));
  ASSIGN_OR_RETURN(std::vector<int64_t> steps, OptionalInts(node, in, 4, "steps"));
  if (axes.empty() && !(in.size() > 3 && in[3])) {
    axes.resize(starts.size());
    std::iota(axes.begin(), axes.end(), 0);
  }
  if (steps.empty() && !(in.size() > 4 && in[4])) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() ||
      steps.size() != starts.size()) {
    return InvalidInput(node, "starts, ends, axes and steps must have the same length");
  }
  ASSIGN_OR_RETURN(axes, NormalizeAxes(node, axes, x->rank()));
  std::vector<SliceAxis> sl(x->rank());
  for (int64_t d = 0; d < x->rank(); ++d) sl[d] = {0, 1, x->dim(d)};
  for (size_t k = 0; k < axes.size(); ++k) {
    if (steps[k] == 0) return InvalidInput(node, "slice step cannot be 0");
    sl[axes[k]] = ClampSlice(starts[k], ends[k], steps[k], x->dim(axes[k]));
  }
  std::vector<int64_t> out(x->rank());
  for (int64_t d = 0; d < x->rank(); ++d) out[d] = sl[d].count;
  std::vector<int64_t> strides = Strides(x->shape());
  ASSIGN_OR_RETURN(Tensor y, GatherElements(node, *x, out, [&](const std::vector<int64_t>& c) {
                     int64_t s = 0;
                     for (size_t d = 0; d < c.size(); ++d) {
                       s += (sl[d].start + c[d] * sl[d].step) * strides[d];
                     }
                     return s;
                   }));
  return std::vector<Tensor>{y};
}

Outs PadKernel(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* x, RequireInput(node, in, 0));
  ASSIGN_OR_RETURN(const Tensor* p, RequireInput(node, in, 1));
  RETURN_IF_ERROR(CheckMovableDType(node, *x));
  const std::string mode = node.GetString("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap") {
    return InvalidInput(node, "unknown pad mode '" + mode + "'");
  }
  const int64_t rank = x->rank();
  ASSIGN_OR_RETURN(std::vector<int64_t> pads, ReadInts(node, *p, "pads"));
  ASSIGN_OR_RETURN(std::vector<int64_t> axes, OptionalInts(node, in, 3, "axes"));
  if (!(in.size() > 3 && in[3])) {
    axes.resize(rank);
    std::iota(axes.begin(), axes.end(), 0);
  }
  ASSIGN_OR_RETURN(axes, NormalizeAxes(node, axes, rank));
  const int64_t na = static_cast<int64_t>(axes.size());
  if (static_cast<int64_t>(pads.size()) != 2 * na) {
    return InvalidInput(node, "pads must have 2 entries per padded axis");
  }
  for (int64_t v : pads) {
    if (v > kMaxOutputElements) {
      return absl::ResourceExhaustedError(node.Describe() + ": pads are too large");
    }
    if (v < -kMaxOutputElements) return InvalidInput(node, "pads remove more than the axis");
  }
  std::vector<int64_t> before(rank, 0), out = x->shape();
  for (int64_t k = 0; k < na; ++k) {
    before[axes[k]] = pads[k];
    out[axes[k]] += pads[k] + pads[k + na];
    if (out[axes[k]] < 0) return InvalidInput(node, "pads remove more than the whole axis");
    if (mode != "constant" && x->dim(axes[k]) == 0 && out[axes[k]] > 0) {
      return InvalidInput(node, "cannot " + mode + "-pad an empty axis");
    }
  }
  Tensor fill(x->dtype(), {});  // zero of the dtype unless constant_value says otherwise
  if (in.size() > 2 && in[2] && in[2]->numel() > 0) {
    if (in[2]->dtype() != x->dtype()) return InvalidInput(node, "constant_value dtype differs");
    fill = *in[2];
  }
  std::vector<int64_t> strides = Strides(x->shape());
  auto src = [&](const std::vector<int64_t>& c) -> int64_t {
    int64_t s = 0;
    for (int64_t d = 0; d < rank; ++d) {
      int64_t i = PadSource(c[d] - before[d], x->dim(d), mode);
      if (i < 0) return -1;
      s += i * strides[d];
    }
    return s;
  };
  ASSIGN_OR_RETURN(Tensor y, GatherElements(node, *x, out, src, &fill));
  return std::vector<Tensor>{y};
}

// DepthToSpace / SpaceToDepth on NCHW with block size b.
Outs BlockKernel(const Node& node, const KernelInputs& in, bool to_space) {
  ASSIGN_OR_RETURN(const Tensor* x, RequireInput(node, in, 0));
  RETURN_IF_ERROR(CheckMovableDType(node, *x));
  if (x->rank() != 4) return InvalidInput(node, "input must be 4-D (NCHW)");
  const int64_t b = node.GetInt("blocksize", 0);
  // b*b must divide the channel count, so a huge b is never valid (and would overflow).
  if (b <= 0 || b > (int64_t{1} << 20)) return InvalidInput(node, "invalid blocksize");
  const int64_t n = x->dim(0), c = x->dim(1), h = x->dim(2), w = x->dim(3);
  const bool crd = node.GetString("mode", "DCR") == "CRD";
  std::vector<int64_t> xs = Strides(x->shape());
  std::vector<int64_t> out;
  std::function<int64_t(const std::vector<int64_t>&)> src;
  if (to_space) {
    if (c % (b * b) != 0) return InvalidInput(node, "channels must be divisible by blocksize^2");
    const int64_t oc = c / (b * b);
    out = {n, oc, h * b, w * b};
    src = [&, oc](const std::vector<int64_t>& o) {
      const int64_t i = o[2] % b, j = o[3] % b;
      const int64_t ch = crd ? o[1] * b * b + i * b + j : (i * b + j) * oc + o[1];
      return o[0] * xs[0] + ch * xs[1] + (o[2] / b) * xs[2] + (o[3] / b) * xs[3];
    };
  } else {
    if (h % b != 0 || w % b != 0) return InvalidInput(node, "H and W must divide by blocksize");
    out = {n, c * b * b, h / b, w / b};
    src = [&](const std::vector<int64_t>& o) {
      const int64_t blk = o[1] / c, ch = o[1] % c;
      const int64_t i = blk / b, j = blk % b;
      return o[0] * xs[0] + ch * xs[1] + (o[2] * b + i) * xs[2] + (o[3] * b + j) * xs[3];
    };
  }
  ASSIGN_OR_RETURN(Tensor y, GatherElements(node, *x, out, src));
  return std::vector<Tensor>{y};
}

}  // namespace

void RegisterLayoutKernels(KernelRegistry& r) {
  r.Register("", "Transpose", TransposeKernel);
  r.Register("", "Concat", ConcatKernel);
  r.Register("", "Split", SplitKernel);
  r.Register("", "Slice", SliceKernel);
  r.Register("", "Pad", PadKernel);
  r.Register("", "DepthToSpace",
             [](const Node& n, const KernelInputs& in) { return BlockKernel(n, in, true); });
  r.Register("", "SpaceToDepth",
             [](const Node& n, const KernelInputs& in) { return BlockKernel(n, in, false); });
}

int64_t PadSource(int64_t i, int64_t n, const std::string& mode) {
  if (i >= 0 && i < n) return i;
  if (mode == "edge") return std::clamp<int64_t>(i, 0, n - 1);
  if (mode == "wrap") return ((i % n) + n) % n;
  if (mode == "reflect") {
    if (n == 1) return 0;
    const int64_t period = 2 * (n - 1);  // reflection without repeating the edge element
    int64_t m = ((i % period) + period) % period;
    return m < n ? m : period - m;
  }
  return -1;
}

}  // namespace kiln::ref

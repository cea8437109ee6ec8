// Window geometry for Conv/ConvTranspose/pools (see nn_window.h). Lives among the ops_*.cc
// files so the reference library (which shape inference links) carries it.
#include <algorithm>
#include <string>

#include "ops/kernel_util.h"
#include "ops/nn_window.h"

namespace kiln::ref::nn {
namespace {

// Geometry attributes above this are rejected, so later products cannot overflow int64.
constexpr int64_t kMaxAttr = int64_t{1} << 30;

absl::StatusOr<std::vector<int64_t>> ReadInts(const Node& node, const std::string& key,
                                              size_t count, int64_t dflt, int64_t min) {
  if (!node.HasAttr(key)) return std::vector<int64_t>(count, dflt);
  std::vector<int64_t> v = node.GetInts(key);
  if (v.size() != count) {
    return InvalidInput(node, key + " has " + std::to_string(v.size()) + " values, expected " +
                                  std::to_string(count));
  }
  for (int64_t x : v) {
    if (x < min || x > kMaxAttr) {
      return InvalidInput(node, key + " value " + std::to_string(x) + " is out of range");
    }
  }
  return v;
}

// Python-style floor division (pads derived from output_shape may be negative).
int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

int64_t CeilDiv(int64_t a, int64_t b) { return -FloorDiv(-a, b); }

absl::StatusOr<std::string> AutoPad(const Node& node) {
  std::string p = node.GetString("auto_pad", "NOTSET");
  if (p.empty()) p = "NOTSET";
  if (p != "NOTSET" && p != "SAME_UPPER" && p != "SAME_LOWER" && p != "VALID") {
    return InvalidInput(node, "unknown auto_pad '" + p + "'");
  }
  return p;
}

// Splits a total padding between begin and end the way ONNX does for SAME_UPPER (extra at
// the end) and SAME_LOWER (extra at the beginning).
void SplitPad(int64_t total, bool upper, int64_t& begin, int64_t& end) {
  if (upper) {
    begin = FloorDiv(total, 2);
    end = total - begin;
  } else {
    end = FloorDiv(total, 2);
    begin = total - end;
  }
}

absl::Status ReadCommon(const Node& node, Window& w) {
  const size_t r = w.rank();
  ASSIGN_OR_RETURN(w.strides, ReadInts(node, "strides", r, 1, 1));
  ASSIGN_OR_RETURN(w.dilations, ReadInts(node, "dilations", r, 1, 1));
  for (size_t d = 0; d < r; ++d) {
    if (w.in[d] < 0 || w.in[d] > kMaxAttr) return InvalidInput(node, "bad input spatial size");
  }
  return absl::OkStatus();
}

// NOTSET: explicit pads, floor or (with ceil_mode) ceil output size. In ceil mode a last
// window that would start inside the end padding is dropped (PyTorch/ONNX rule).
absl::Status ExplicitPads(const Node& node, Window& w, bool ceil_mode) {
  const size_t r = w.rank();
  ASSIGN_OR_RETURN(std::vector<int64_t> pads, ReadInts(node, "pads", 2 * r, 0, 0));
  for (size_t d = 0; d < r; ++d) {
    w.pad_begin[d] = pads[d];
    w.pad_end[d] = pads[d + r];
    int64_t span = w.in[d] + w.pad_begin[d] + w.pad_end[d] - w.Extent(d);
    if (span < 0) {
      return InvalidInput(node, "window extent " + std::to_string(w.Extent(d)) +
                                    " exceeds the padded input size in spatial dim " +
                                    std::to_string(d));
    }
    int64_t out = (ceil_mode ? CeilDiv(span, w.strides[d]) : span / w.strides[d]) + 1;
    if (ceil_mode && out > 1 && (out - 1) * w.strides[d] >= w.in[d] + w.pad_begin[d]) --out;
    w.out[d] = out;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> KernelShape(const Node& node, size_t spatial_rank,
                                                 const std::vector<int64_t>* from_weights) {
  if (!node.HasAttr("kernel_shape")) {
    if (!from_weights) return InvalidInput(node, "kernel_shape attribute is required");
    if (from_weights->size() != spatial_rank) {
      return InvalidInput(node, "weights rank does not match the input");
    }
    for (int64_t k : *from_weights) {
      if (k < 1) return InvalidInput(node, "weights have an empty spatial dim");
    }
    return *from_weights;
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> k, ReadInts(node, "kernel_shape", spatial_rank, 1, 1));
  if (from_weights && *from_weights != k) {
    return InvalidInput(node, "kernel_shape does not match the weights");
  }
  return k;
}

namespace {

// A window over `in_spatial` with no padding yet and the output still to be computed.
Window EmptyWindow(const std::vector<int64_t>& in_spatial, const std::vector<int64_t>& kernel) {
  Window w;
  const size_t r = in_spatial.size();
  w.in = in_spatial;
  w.kernel = kernel;
  w.pad_begin.assign(r, 0);
  w.pad_end.assign(r, 0);
  w.out.assign(r, 0);
  return w;
}

}  // namespace

absl::StatusOr<Window> ConvWindow(const Node& node, const std::vector<int64_t>& in_spatial,
                                  const std::vector<int64_t>& kernel) {
  const size_t r = in_spatial.size();
  Window w = EmptyWindow(in_spatial, kernel);
  RETURN_IF_ERROR(ReadCommon(node, w));
  ASSIGN_OR_RETURN(std::string auto_pad, AutoPad(node));
  int64_t ceil_mode = node.GetInt("ceil_mode", 0);
  if (auto_pad == "NOTSET") {
    RETURN_IF_ERROR(ExplicitPads(node, w, ceil_mode != 0));
    return w;
  }
  for (size_t d = 0; d < r; ++d) {
    if (auto_pad == "VALID") {
      if (w.in[d] < w.Extent(d)) return InvalidInput(node, "window larger than the input");
      w.out[d] = (w.in[d] - w.Extent(d)) / w.strides[d] + 1;
      continue;
    }
    w.out[d] = CeilDiv(w.in[d], w.strides[d]);
    int64_t total = std::max<int64_t>(0, (w.out[d] - 1) * w.strides[d] + w.Extent(d) - w.in[d]);
    SplitPad(total, auto_pad == "SAME_UPPER", w.pad_begin[d], w.pad_end[d]);
  }
  return w;
}

absl::StatusOr<Window> ConvTransposeWindow(const Node& node, const std::vector<int64_t>& in_spatial,
                                           const std::vector<int64_t>& kernel) {
  const size_t r = in_spatial.size();
  Window w = EmptyWindow(in_spatial, kernel);
  RETURN_IF_ERROR(ReadCommon(node, w));
  ASSIGN_OR_RETURN(w.output_padding, ReadInts(node, "output_padding", r, 0, 0));
  ASSIGN_OR_RETURN(std::string auto_pad, AutoPad(node));
  std::vector<int64_t> out_shape = node.GetInts("output_shape");
  // Some exporters give the full (N, C, spatial...) shape: keep the spatial tail.
  if (out_shape.size() > r) out_shape.erase(out_shape.begin(), out_shape.end() - r);
  if (!out_shape.empty() && out_shape.size() != r) {
    return InvalidInput(node, "output_shape has the wrong length");
  }
  std::vector<int64_t> pads;
  if (out_shape.empty() && auto_pad == "NOTSET") {
    ASSIGN_OR_RETURN(pads, ReadInts(node, "pads", 2 * r, 0, 0));
  }
  for (size_t d = 0; d < r; ++d) {
    if (w.in[d] < 1) return InvalidInput(node, "empty input spatial dim");
    int64_t natural = w.strides[d] * (w.in[d] - 1) + w.output_padding[d] + w.Extent(d);
    int64_t target = -1;
    if (!out_shape.empty()) {
      if (out_shape[d] < 0) return InvalidInput(node, "negative output_shape value");
      target = out_shape[d];
    } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      target = w.in[d] * w.strides[d];
    }
    if (target >= 0) {
      if (target > kMaxAttr) return InvalidInput(node, "output_shape value out of range");
      SplitPad(natural - target, auto_pad == "SAME_UPPER", w.pad_begin[d], w.pad_end[d]);
    } else if (!pads.empty()) {
      w.pad_begin[d] = pads[d];
      w.pad_end[d] = pads[d + r];
    }
    w.out[d] = natural - w.pad_begin[d] - w.pad_end[d];
    if (w.out[d] < 0) return InvalidInput(node, "pads exceed the output size");
  }
  return w;
}

absl::StatusOr<Win3> To3D(const Node& node, const Window& w) {
  const size_t r = w.rank();
  if (r < 1) return InvalidInput(node, "the input needs at least one spatial dim");
  if (r > 3) return Unsupported(node, "more than 3 spatial dims");
  Win3 g;
  for (size_t i = 0; i < 3; ++i) {
    const bool unit = i < 3 - r;  // a leading unit dim
    const size_t j = unit ? 0 : i - (3 - r);
    g.in[i] = unit ? 1 : w.in[j];
    g.k[i] = unit ? 1 : w.kernel[j];
    g.s[i] = unit ? 1 : w.strides[j];
    g.d[i] = unit ? 1 : w.dilations[j];
    g.pb[i] = unit ? 0 : w.pad_begin[j];
    g.pe[i] = unit ? 0 : w.pad_end[j];
    g.out[i] = unit ? 1 : w.out[j];
  }
  return g;
}

void ValidRange(int64_t base, int64_t s, int64_t n, int64_t limit, int64_t& lo, int64_t& hi) {
  lo = base >= 0 ? 0 : (-base + s - 1) / s;
  hi = limit - 1 - base < 0 ? 0 : std::min(n, (limit - 1 - base) / s + 1);
  if (hi < lo) hi = lo;
}

}  // namespace kiln::ref::nn

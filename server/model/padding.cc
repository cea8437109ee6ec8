#include "server/model/padding.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "compiler/shape/dim_expr.h"

namespace kiln::server {

std::vector<int64_t> ClassLadder(int64_t min, int64_t max, int64_t typical, bool coarse) {
  min = std::max<int64_t>(min, 1);  // an empty dim (a first step's cache) pads to the first class
  // The range's start too: a decoder's step runs one new position at a time, and padding it
  // to 16 would be 16 times the work.
  std::set<int64_t> sizes{min, typical, max};
  // 16, 24, 32, 48, ...: each step at most 1.5x the one before, so a padded request costs
  // at most 1.5x (2x when coarse) the work of its own size.
  for (int64_t p = 16; p < max; p *= 2) {
    if (p > min) sizes.insert(p);
    const int64_t half_step = p + p / 2;
    if (!coarse && half_step > min && half_step < max) sizes.insert(half_step);
  }
  return {sizes.begin(), sizes.end()};
}

std::vector<DimValues> AllClasses(const ShapeClasses& classes) {
  std::vector<DimValues> out{DimValues{}};
  for (const auto& [symbol, sizes] : classes) {
    std::vector<DimValues> next;
    for (const DimValues& prefix : out) {
      for (int64_t size : sizes) {
        DimValues d = prefix;
        d[symbol] = size;
        next.push_back(std::move(d));
      }
    }
    out = std::move(next);
  }
  return out;
}

absl::StatusOr<DimValues> ClassOf(const ShapeClasses& classes, const DimValues& dims) {
  DimValues out = dims;
  for (auto& [symbol, size] : out) {
    auto it = classes.find(symbol);
    if (it == classes.end()) continue;
    auto c = std::lower_bound(it->second.begin(), it->second.end(), size);
    if (c == it->second.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", symbol, "' is ", size, ", above its largest class ", it->second.back()));
    }
    size = *c;
  }
  return out;
}

namespace {

// One run of a dim's elements moved from the source to the result.
struct Segment {
  int64_t src = 0, dst = 0, len = 0;
};

// Copies every combination of one segment per dim, recursing over the dims; the last dim's
// segments are contiguous runs.
void CopySegments(const char* src, const std::vector<int64_t>& src_stride, char* dst,
                  const std::vector<int64_t>& dst_stride,
                  const std::vector<std::vector<Segment>>& plan, size_t dim, int64_t src_off,
                  int64_t dst_off, size_t elem) {
  const bool last = dim + 1 == plan.size();
  for (const Segment& seg : plan[dim]) {
    if (last) {
      std::memcpy(dst + (dst_off + seg.dst) * elem, src + (src_off + seg.src) * elem,
                  static_cast<size_t>(seg.len) * elem);
      continue;
    }
    for (int64_t i = 0; i < seg.len; ++i) {
      CopySegments(src, src_stride, dst, dst_stride, plan, dim + 1,
                   src_off + (seg.src + i) * src_stride[dim],
                   dst_off + (seg.dst + i) * dst_stride[dim], elem);
    }
  }
}

// `t` copied into a zero tensor of `shape` along `plan` (per dim, its segments).
absl::StatusOr<Tensor> Regrid(const Tensor& t, const std::vector<int64_t>& shape,
                              const std::vector<std::vector<Segment>>& plan) {
  const size_t elem = DTypeSize(t.dtype());
  if (elem == 0) {
    return absl::UnimplementedError(
        absl::StrCat("a ", DTypeName(t.dtype()), " tensor cannot be padded or cut"));
  }
  Tensor out(t.dtype(), shape);  // zero-filled: the padding
  const size_t rank = shape.size();
  if (rank == 0 || out.numel() == 0 || t.numel() == 0) return out;
  std::vector<int64_t> src_stride(rank, 1), dst_stride(rank, 1);
  for (size_t i = rank; i-- > 1;) {
    src_stride[i - 1] = src_stride[i] * t.shape()[i];
    dst_stride[i - 1] = dst_stride[i] * shape[i];
  }
  CopySegments(static_cast<const char*>(t.raw()), src_stride, static_cast<char*>(out.raw_mutable()),
               dst_stride, plan, 0, 0, 0, elem);
  return out;
}

// The new size of a dim labelled `label` and the segments that move its elements, going from
// the sizes `from` to `to`: a symbol keeps its prefix; a sum ("past + sequence", "past + 1")
// is one region per term, each keeping its prefix at its new offset.
absl::Status PlanDim(const std::string& label, int64_t size, const DimValues& from,
                     const DimValues& to, int64_t& new_size, std::vector<Segment>& segments) {
  new_size = size;
  segments = {Segment{0, 0, size}};
  if (label.empty()) return absl::OkStatus();
  if (auto it = to.find(label); it != to.end()) {
    new_size = it->second;
    segments = {Segment{0, 0, std::min(size, new_size)}};
    return absl::OkStatus();
  }
  std::vector<std::pair<std::string, int64_t>> terms;
  if (!shape::SumTerms(label, &terms)) return absl::OkStatus();  // not a padded dim
  segments.clear();
  int64_t src = 0, dst = 0;
  for (const auto& [symbol, constant] : terms) {
    auto f = from.find(symbol), t = to.find(symbol);
    if (!symbol.empty() && (f == from.end() || t == to.end())) {
      return absl::InvalidArgumentError(
          absl::StrCat("dim '", label, "': no size for '", symbol, "'"));
    }
    const int64_t a = symbol.empty() ? constant : f->second,
                  b = symbol.empty() ? constant : t->second;
    segments.push_back(Segment{src, dst, std::min(a, b)});
    src += a;
    dst += b;
  }
  if (src != size) {
    return absl::InvalidArgumentError(
        absl::StrCat("dim '", label, "' is ", size, ", but its terms make ", src));
  }
  new_size = dst;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<Tensor>> ResizeToDims(std::vector<Tensor> tensors,
                                                 const DimSymbols& symbols, const DimValues& from,
                                                 const DimValues& to) {
  for (size_t k = 0; k < tensors.size() && k < symbols.size(); ++k) {
    std::vector<int64_t> shape = tensors[k].shape();
    std::vector<std::vector<Segment>> plan(shape.size());
    for (size_t i = 0; i < shape.size(); ++i) {
      const std::string label = i < symbols[k].size() ? symbols[k][i] : "";
      RETURN_IF_ERROR(PlanDim(label, tensors[k].shape()[i], from, to, shape[i], plan[i]));
    }
    if (shape == tensors[k].shape()) continue;
    ASSIGN_OR_RETURN(tensors[k], Regrid(tensors[k], shape, plan));
  }
  return tensors;
}

}  // namespace kiln::server

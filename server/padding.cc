#include "server/padding.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"

namespace kiln::server {

std::vector<int64_t> ClassLadder(int64_t min, int64_t max, int64_t typical, bool coarse) {
  std::set<int64_t> sizes{typical, max};
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
      return absl::InvalidArgumentError(absl::StrCat("'", symbol, "' is ", size,
                                                     ", above its largest class ",
                                                     it->second.back()));
    }
    size = *c;
  }
  return out;
}

namespace {

// Copies the box `extent` (per dim, the elements both shapes have) from `src` (strides of
// `from`) to `dst` (strides of `to`), rows of the innermost dim at a time.
void CopyBox(const char* src, const std::vector<int64_t>& from, char* dst,
             const std::vector<int64_t>& to, const std::vector<int64_t>& extent, size_t elem) {
  const size_t rank = extent.size();
  std::vector<int64_t> src_stride(rank, 1), dst_stride(rank, 1);
  for (size_t i = rank; i-- > 1;) {
    src_stride[i - 1] = src_stride[i] * from[i];
    dst_stride[i - 1] = dst_stride[i] * to[i];
  }
  const size_t row_bytes = static_cast<size_t>(extent[rank - 1]) * elem;
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < rank; ++i) rows *= extent[i];
  std::vector<int64_t> index(rank, 0);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t s = 0, d = 0;
    for (size_t i = 0; i + 1 < rank; ++i) {
      s += index[i] * src_stride[i];
      d += index[i] * dst_stride[i];
    }
    std::memcpy(dst + d * elem, src + s * elem, row_bytes);
    for (size_t i = rank - 1; i-- > 0;) {  // next index of the outer dims
      if (++index[i] < extent[i]) break;
      index[i] = 0;
    }
  }
}

}  // namespace

absl::StatusOr<Tensor> ResizeRegion(const Tensor& t, const std::vector<int64_t>& shape) {
  if (shape.size() != t.shape().size()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot resize a rank-", t.rank(),
                                                   " tensor to rank ", shape.size()));
  }
  if (shape == t.shape()) return t;
  const size_t elem = DTypeSize(t.dtype());
  if (elem == 0) {
    return absl::UnimplementedError(absl::StrCat("a ", DTypeName(t.dtype()),
                                                 " tensor cannot be padded or cut"));
  }
  Tensor out(t.dtype(), shape);  // zero-filled: the padding
  std::vector<int64_t> extent(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) extent[i] = std::min(shape[i], t.shape()[i]);
  const bool empty = std::any_of(extent.begin(), extent.end(), [](int64_t e) { return e == 0; });
  if (!empty && !shape.empty()) {
    CopyBox(static_cast<const char*>(t.raw()), t.shape(), static_cast<char*>(out.raw_mutable()),
            shape, extent, elem);
  }
  return out;
}

absl::StatusOr<std::vector<Tensor>> ResizeToDims(std::vector<Tensor> tensors,
                                                 const DimSymbols& symbols, const DimValues& to) {
  for (size_t k = 0; k < tensors.size() && k < symbols.size(); ++k) {
    std::vector<int64_t> shape = tensors[k].shape();
    for (size_t i = 0; i < shape.size() && i < symbols[k].size(); ++i) {
      auto it = symbols[k][i].empty() ? to.end() : to.find(symbols[k][i]);
      if (it != to.end()) shape[i] = it->second;
    }
    if (shape == tensors[k].shape()) continue;
    ASSIGN_OR_RETURN(tensors[k], ResizeRegion(tensors[k], shape));
  }
  return tensors;
}

}  // namespace kiln::server

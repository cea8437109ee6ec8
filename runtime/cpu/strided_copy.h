// A copy between two dense strided layouts of the same tensor (NCHW <-> NHWC and any other
// permutation of plain dims): the layout change at the edges of a channels-last region.
//
// The copy is a batch of 2-D transposes: the dim that is contiguous in the destination and
// the one contiguous in the source span a tile (16 x 16 elements: both sides touch whole cache
// lines), every other dim is an outer loop. When both sides share their contiguous dim the
// inner loop is a straight run. Work splits over the OpenMP team by tile rows when large.
//
// Kiln runs these itself rather than through oneDNN's reorder: oneDNN 2.6's plain-to-plain
// reorder allocates on its worker threads on every call, which the engine's zero-allocation
// steady state cannot allow. oneDNN headers stay out of this file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace kiln::cpu {

class StridedCopy {
 public:
  // `dims` with the element strides of each side. nullopt unless both sides are dense (every
  // element exactly once, no gaps) and the element is 1, 2, 4 or 8 bytes.
  static std::optional<StridedCopy> Plan(const std::vector<int64_t>& dims,
                                         const std::vector<int64_t>& src_strides,
                                         const std::vector<int64_t>& dst_strides,
                                         size_t elem_bytes);

  void Run(const void* src, void* dst) const;
  int64_t elements() const { return elements_; }

 private:
  struct Outer {
    int64_t size, src_stride, dst_stride;
  };
  template <class T>
  void RunAs(const T* src, T* dst) const;

  // Element (r, c) of one tile plane is src[r + c * src_col_stride_] and
  // dst[c + r * dst_row_stride_]: rows run along the source's unit-stride dim, columns along
  // the destination's. When both sides share their unit-stride dim, rows_ is 1 and each
  // plane is one contiguous run of cols_ elements.
  std::vector<Outer> outer_;  // every other dim, outermost first
  int64_t rows_ = 1, cols_ = 1, src_col_stride_ = 0, dst_row_stride_ = 0;
  int64_t row_block_ = 16;  // rows per work item
  int64_t elements_ = 0;
  size_t elem_ = 4;
};

}  // namespace kiln::cpu

#include "runtime/cpu/strided_copy.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "runtime/cpu/isa.h"
#include "runtime/cpu/own_kernels.h"

#if defined(__x86_64__) && defined(__GNUC__)
// GCC 12 flags its own avx512fintrin.h (`__Y = __Y` in _mm512_undefined_*) as uninitialized
// once those helpers inline here (GCC bug 105593); the warning is about the header only.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#define KILN_HAVE_AVX512_TILE 1
#endif

namespace kiln::cpu {
namespace {

struct Dim {
  int64_t size, src, dst;
};

// Size-1 dims dropped, the rest ordered by source stride (outermost first), and neighbours
// that are contiguous with each other on both sides merged into one dim.
std::vector<Dim> Canonical(const std::vector<int64_t>& dims, const std::vector<int64_t>& src,
                           const std::vector<int64_t>& dst) {
  std::vector<Dim> d;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] != 1) d.push_back({dims[i], src[i], dst[i]});
  }
  std::stable_sort(d.begin(), d.end(), [](const Dim& a, const Dim& b) { return a.src > b.src; });
  std::vector<Dim> merged;
  for (const Dim& x : d) {
    if (!merged.empty()) {
      Dim& m = merged.back();
      if (m.src == x.src * x.size && m.dst == x.dst * x.size) {
        m = {m.size * x.size, x.src, x.dst};
        continue;
      }
    }
    merged.push_back(x);
  }
  return merged;
}

// Every element exactly once: strides, sorted, are the running products of the sizes.
bool Dense(std::vector<Dim> d, bool dst_side) {
  auto stride = [&](const Dim& x) { return dst_side ? x.dst : x.src; };
  std::sort(d.begin(), d.end(), [&](const Dim& a, const Dim& b) { return stride(a) < stride(b); });
  int64_t expect = 1;
  for (const Dim& x : d) {
    if (stride(x) != expect) return false;
    expect *= x.size;
  }
  return true;
}

// One tile of up to 16 x 16 elements: element (r, c) from in[r + c * sc] to out[c + r * dr].
// Narrow blocks walk the source contiguously (the short strided side is the store).
template <class T>
void TileScalar(const T* in, int64_t sc, T* out, int64_t dr, int64_t rows, int64_t cols) {
  if (cols < 8) {
    for (int64_t c = 0; c < cols; ++c) {
      for (int64_t r = 0; r < rows; ++r) out[r * dr + c] = in[r + c * sc];
    }
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) out[r * dr + c] = in[r + c * sc];
  }
}

#ifdef KILN_HAVE_AVX512_TILE
// v[i] holds row i of a 16 x 16 block of 32-bit elements; afterwards it holds column i.
// Three shuffle stages: pairs of rows within 128-bit lanes, then pairs of pairs, then lanes.
__attribute__((target("avx512f"))) void Transpose16x16(__m512* v) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(v[i], v[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(v[i], v[i + 1]);
  }
  __m512 u[16];  // u[4k + m], lane L: column 4L + m of rows 4k .. 4k + 3
  for (int k = 0; k < 16; k += 4) {
    const __m512d a = _mm512_castps_pd(t[k]), b = _mm512_castps_pd(t[k + 1]);
    const __m512d c = _mm512_castps_pd(t[k + 2]), d = _mm512_castps_pd(t[k + 3]);
    u[k] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    u[k + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    u[k + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    u[k + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  for (int m = 0; m < 4; ++m) {
    const __m512 p0 = _mm512_shuffle_f32x4(u[m], u[4 + m], 0x88);  // lanes 0, 2 of each
    const __m512 p1 = _mm512_shuffle_f32x4(u[m], u[4 + m], 0xdd);  // lanes 1, 3 of each
    const __m512 q0 = _mm512_shuffle_f32x4(u[8 + m], u[12 + m], 0x88);
    const __m512 q1 = _mm512_shuffle_f32x4(u[8 + m], u[12 + m], 0xdd);
    v[m] = _mm512_shuffle_f32x4(p0, q0, 0x88);
    v[8 + m] = _mm512_shuffle_f32x4(p0, q0, 0xdd);
    v[4 + m] = _mm512_shuffle_f32x4(p1, q1, 0x88);
    v[12 + m] = _mm512_shuffle_f32x4(p1, q1, 0xdd);
  }
}

// TileScalar for 32-bit elements in registers: masked loads along the source's rows (no
// access past the tile, padded with zeros), one transpose, masked stores of `cols` elements.
__attribute__((target("avx512f"))) void Tile32Avx512(const uint32_t* in, int64_t sc,
                                                     uint32_t* out, int64_t dr, int64_t rows,
                                                     int64_t cols) {
  const __mmask16 rmask = static_cast<__mmask16>((1u << rows) - 1);
  const __mmask16 cmask = static_cast<__mmask16>((1u << cols) - 1);
  __m512 v[16];
  for (int64_t c = 0; c < 16; ++c) {
    v[c] = c < cols ? _mm512_maskz_loadu_ps(rmask, in + c * sc) : _mm512_setzero_ps();
  }
  Transpose16x16(v);
  for (int64_t r = 0; r < rows; ++r) _mm512_mask_storeu_ps(out + r * dr, cmask, v[r]);
}

bool HaveAvx512() { return ActiveIsa() >= Isa::kAvx512; }
#endif

template <class T>
void Tile(const T* in, int64_t sc, T* out, int64_t dr, int64_t rows, int64_t cols) {
#ifdef KILN_HAVE_AVX512_TILE
  if constexpr (sizeof(T) == 4) {
    if (HaveAvx512()) return Tile32Avx512(in, sc, out, dr, rows, cols);
  }
#endif
  TileScalar(in, sc, out, dr, rows, cols);
}

}  // namespace

std::optional<StridedCopy> StridedCopy::Plan(const std::vector<int64_t>& dims,
                                             const std::vector<int64_t>& src_strides,
                                             const std::vector<int64_t>& dst_strides,
                                             size_t elem_bytes) {
  if (dims.size() != src_strides.size() || dims.size() != dst_strides.size()) return std::nullopt;
  if (!IsWordSize(elem_bytes)) return std::nullopt;
  for (int64_t n : dims) {
    if (n <= 0) return std::nullopt;
  }
  std::vector<Dim> d = Canonical(dims, src_strides, dst_strides);
  if (!Dense(d, false) || !Dense(d, true)) return std::nullopt;
  StridedCopy c;
  c.elem_ = elem_bytes;
  c.elements_ = std::accumulate(dims.begin(), dims.end(), int64_t{1}, std::multiplies<>());
  if (d.empty()) d.push_back({1, 1, 1});  // a single element
  auto unit = [&](bool dst_side) {
    for (size_t i = 0; i < d.size(); ++i) {
      if ((dst_side ? d[i].dst : d[i].src) == 1) return i;
    }
    return d.size();  // unreachable for dense layouts
  };
  const size_t a = unit(true), b = unit(false);
  c.cols_ = d[a].size;
  c.src_col_stride_ = d[a].src;
  if (a != b) {
    c.rows_ = d[b].size;
    c.dst_row_stride_ = d[b].dst;
  }
  for (size_t i = 0; i < d.size(); ++i) {
    if (i != a && i != b) c.outer_.push_back({d[i].size, d[i].src, d[i].dst});
  }
  // Work items of at least ~1K elements, in whole 16-row tiles.
  c.row_block_ = std::max<int64_t>(16, (1024 / c.cols_ + 15) / 16 * 16);
  return c;
}

template <class T>
void StridedCopy::RunAs(const T* src, T* dst) const {
  const int64_t row_tiles = (rows_ + row_block_ - 1) / row_block_;
  int64_t planes = 1;
  for (const Outer& o : outer_) planes *= o.size;
  ForEachIndex(planes * row_tiles, elements_ >= kParallelElements, [&](int64_t item) {
    int64_t plane = item / row_tiles, s = 0, d = 0;
    for (auto it = outer_.rbegin(); it != outer_.rend(); ++it) {
      const int64_t i = plane % it->size;
      plane /= it->size;
      s += i * it->src_stride;
      d += i * it->dst_stride;
    }
    if (rows_ == 1) {
      std::memcpy(dst + d, src + s, static_cast<size_t>(cols_) * sizeof(T));
      return;
    }
    const int64_t r0 = (item % row_tiles) * row_block_, r1 = std::min(rows_, r0 + row_block_);
    if (cols_ < 8) {  // narrow: the whole row block at once (long contiguous reads)
      TileScalar(src + s + r0, src_col_stride_, dst + d + r0 * dst_row_stride_,
                 dst_row_stride_, r1 - r0, cols_);
      return;
    }
    for (int64_t c0 = 0; c0 < cols_; c0 += 16) {
      for (int64_t t0 = r0; t0 < r1; t0 += 16) {
        Tile(src + s + t0 + c0 * src_col_stride_, src_col_stride_,
             dst + d + t0 * dst_row_stride_ + c0, dst_row_stride_, std::min<int64_t>(16, r1 - t0),
             std::min<int64_t>(16, cols_ - c0));
      }
    }
  });
}

void StridedCopy::Run(const void* src, void* dst) const {
  WithWordType(elem_, [&](auto word) {
    using T = decltype(word);
    RunAs(static_cast<const T*>(src), static_cast<T*>(dst));
  });
}

}  // namespace kiln::cpu

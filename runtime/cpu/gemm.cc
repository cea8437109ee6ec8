// The GEMM driver: packing and the loop nest around the microkernels (gemm.h).
//
// Loop order per work item, BLIS's: K blocks outermost (the packed A block of mc x kc stays
// in L2 while every B panel of the item's N range passes under it), then B panels (one kc x
// nr panel in L1 while the micro-panels of A stream through), then micro-panels of A.
#include "runtime/cpu/gemm.h"

#include <algorithm>

#include "runtime/cpu/gemm_microkernels.h"
#include "runtime/cpu/own_kernels.h"

namespace kiln::cpu::gemm {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t RoundUp(int64_t a, int64_t b) { return CeilDiv(a, b) * b; }

// Rows [i0, i0 + mb) and columns [p0, p0 + kb) of A into micro-panels of mr rows (kb x mr
// each, rows past mb zero), scaled by alpha.
void PackA(const Blocking& bl, const View& a, int64_t i0, int64_t mb, int64_t p0, int64_t kb,
           float alpha, float* out) {
  const int mr = bl.mr;
  for (int64_t ir = 0; ir < mb; ir += mr) {
    float* panel = out + (ir / mr) * kb * mr;
    const int64_t rows = std::min<int64_t>(mr, mb - ir);
    for (int64_t r = 0; r < rows; ++r) {
      const float* src = a.data + (i0 + ir + r) * a.rs + p0 * a.cs;
      if (a.cs == 1) {
        for (int64_t p = 0; p < kb; ++p) panel[p * mr + r] = alpha * src[p];
      } else {
        for (int64_t p = 0; p < kb; ++p) panel[p * mr + r] = alpha * src[p * a.cs];
      }
    }
    for (int64_t r = rows; r < mr; ++r) {
      for (int64_t p = 0; p < kb; ++p) panel[p * mr + r] = 0.f;
    }
  }
}

// The work items: problems x M blocks x N ranges. M blocks are ranges of micro-rows (mr rows
// each) cut evenly, so no thread is left with a short last block; their count is a multiple
// of the team where the rows allow it.
struct Grid {
  int64_t m, n, k;
  int64_t micro_rows, mblocks, panels, nsplit, bstride;
  // Rows of M block b: [first, last).
  std::pair<int64_t, int64_t> Rows(const Blocking& bl, int64_t b) const {
    const int64_t r0 = b * micro_rows / mblocks, r1 = (b + 1) * micro_rows / mblocks;
    return {r0 * bl.mr, std::min(m, r1 * bl.mr)};
  }
  std::pair<int64_t, int64_t> Panels(int64_t s) const {
    return {s * panels / nsplit, (s + 1) * panels / nsplit};
  }
};

Grid MakeGrid(const Blocking& bl, int64_t count, int64_t m, int64_t n, int64_t k, bool parallel,
              int threads) {
  Grid g{m, n, k, CeilDiv(m, bl.mr), 0, CeilDiv(n, bl.nr), 1, RoundUp(n, bl.nr)};
  const int64_t per_block = bl.mc / bl.mr;  // micro-rows that fit the A packing space
  g.mblocks = CeilDiv(g.micro_rows, per_block);
  const int64_t team = parallel ? std::max(1, threads) : 1;
  // Rows split across the team only where they fill more than one packed block of A: below
  // that each thread would stream all of B for its share of a few rows (a 64-token prompt
  // chunk through a 768 x 768 weight: B is 2.4 MB, A 0.2 MB), where splitting B's panels
  // (below) has each thread read its own part of B once.
  if (team > 1 && g.micro_rows >= team && g.mblocks > 1) {
    g.mblocks = std::min(g.micro_rows, RoundUp(g.mblocks, team));
  }
  // Too few row blocks for the team (a batch-1 classifier, a few rows of text): split the N
  // panels too, to a multiple of the team in all.
  const int64_t base = count * g.mblocks;
  if (team > 1 && base < 2 * team) {
    int64_t split = CeilDiv(2 * team, base);
    while ((base * split) % team != 0) ++split;
    g.nsplit = std::max<int64_t>(1, std::min(g.panels, split));
  }
  return g;
}

// One work item: problem p, M block mi, N split s.
void RunItem(const Blocking& bl, MicroKernel micro, const Grid& g, const Problem& pr, int64_t p,
             int64_t mi, int64_t s, float* ap, const TileFn& tile) {
  const auto [i0, i1] = g.Rows(bl, mi);
  const auto [j0, j1] = g.Panels(s);
  const int64_t mb = i1 - i0;
  if (mb <= 0 || j0 >= j1) return;
  const int nr = bl.nr, mr = bl.mr;
  if (g.k == 0) {
    for (int64_t i = i0; i < i1; ++i) {
      std::fill(pr.c + i * pr.ldc + j0 * nr, pr.c + i * pr.ldc + std::min(g.n, j1 * nr), 0.f);
    }
  }
  for (int64_t pc = 0; pc < std::max<int64_t>(g.k, 1); pc += bl.kc) {
    const int64_t kb = std::min(bl.kc, g.k - pc);
    const bool last = pc + bl.kc >= g.k;
    if (kb > 0) PackA(bl, pr.a, i0, mb, pc, kb, pr.alpha, ap);
    const float* block = pr.b_packed + pc * g.bstride;
    for (int64_t jp = j0; jp < j1; ++jp) {
      const int cols = static_cast<int>(std::min<int64_t>(nr, g.n - jp * nr));
      for (int64_t ir = 0; ir < mb; ir += mr) {
        const int rows = static_cast<int>(std::min<int64_t>(mr, mb - ir));
        float* c = pr.c + (i0 + ir) * pr.ldc + jp * nr;
        if (kb > 0) {
          micro(kb, ap + (ir / mr) * kb * mr, block + jp * kb * nr, c, pr.ldc, rows, cols, pc > 0);
        }
        if (last && tile) tile(p, i0 + ir, rows, jp * nr, cols);
      }
    }
  }
}

}  // namespace

Blocking BlockingFor(Isa isa) {
  const MicroShape ms = MicroFor(isa);
  Blocking b;
  b.isa = isa;
  b.mr = ms.mr;
  b.nr = ms.nr;
  b.kc = 256;
  b.mc = ms.mr * (96 / ms.mr);
  return b;
}

int64_t PackedBFloats(const Blocking& bl, int64_t k, int64_t n) {
  return std::max<int64_t>(k, 1) * RoundUp(std::max<int64_t>(n, 1), bl.nr);
}

int64_t APackFloats(const Blocking& bl) { return bl.mc * bl.kc; }

void PackB(const Blocking& bl, View b, int64_t k, int64_t n, float alpha, float* out) {
  const int64_t np = RoundUp(std::max<int64_t>(n, 1), bl.nr);
  const int nr = bl.nr;
  for (int64_t pc = 0; pc < k; pc += bl.kc) {
    const int64_t kb = std::min(bl.kc, k - pc);
    for (int64_t j = 0; j < np / nr; ++j) {
      float* panel = out + pc * np + j * kb * nr;
      const int64_t cols = std::min<int64_t>(nr, n - j * nr);
      for (int64_t p = 0; p < kb; ++p) {
        const float* src = b.data + (pc + p) * b.rs + j * nr * b.cs;
        float* dst = panel + p * nr;
        for (int64_t c = 0; c < cols; ++c) dst[c] = alpha * src[c * b.cs];
        for (int64_t c = cols; c < nr; ++c) dst[c] = 0.f;
      }
    }
  }
}

void Run(const Blocking& bl, const Problem* problems, int64_t count, int64_t m, int64_t n,
         int64_t k, bool parallel, int threads, float* a_pack, const TileFn& tile) {
  if (count == 0 || m == 0 || n == 0) return;
  const Grid g = MakeGrid(bl, count, m, n, k, parallel, threads);
  const MicroKernel micro = MicroFor(bl.isa).kernel;
  const int64_t items = count * g.mblocks * g.nsplit;
  const int64_t pack = APackFloats(bl);
  ForEachChunk(items, parallel, threads, [&](int t, int64_t begin, int64_t end) {
    for (int64_t it = begin; it < end; ++it) {
      const int64_t s = it % g.nsplit, mi = (it / g.nsplit) % g.mblocks;
      const int64_t p = it / (g.nsplit * g.mblocks);
      RunItem(bl, micro, g, problems[p], p, mi, s, a_pack + t * pack, tile);
    }
  });
}

}  // namespace kiln::cpu::gemm

// Kiln's own GEMM against oneDNN's matmul primitive on the same shapes, in one process, both
// with a constant (prepacked) B as the CPU engine uses them. Prints p50 per side and the
// ratio. A benchmark, not a test.
//   gemm_bench [--threads T] [--runs R] MxNxK ...
// The ISA follows KILN_MAX_CPU_ISA (both libraries), so `KILN_MAX_CPU_ISA=avx2 gemm_bench`
// measures the AVX2 level on an AVX-512 machine.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "oneapi/dnnl/dnnl.hpp"
#include "runtime/cpu/gemm.h"
#include "runtime/cpu/isa.h"

namespace {

using Clock = std::chrono::steady_clock;
using kiln::cpu::gemm::Blocking;

struct Shape {
  int64_t m, n, k;
};

float* AlignedFloats(int64_t n) {
  return static_cast<float*>(std::aligned_alloc(64, ((n * 4 + 63) / 64) * 64 + 64));
}

template <class F>
double P50Ms(int runs, F&& f) {
  f();
  std::vector<double> t;
  for (int i = 0; i < runs; ++i) {
    const auto t0 = Clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
  return t[t.size() / 2];
}

double OwnMs(const Shape& s, const std::vector<float>& a, const std::vector<float>& b, int threads,
             int runs) {
  const Blocking bl = kiln::cpu::gemm::BlockingFor(kiln::cpu::ActiveIsa());
  float* packed = AlignedFloats(kiln::cpu::gemm::PackedBFloats(bl, s.k, s.n));
  kiln::cpu::gemm::PackB(bl, {b.data(), s.n, 1}, s.k, s.n, 1.f, packed);
  float* apack = AlignedFloats(threads * kiln::cpu::gemm::APackFloats(bl));
  std::vector<float> c(s.m * s.n);
  kiln::cpu::gemm::Problem pr{{a.data(), s.k, 1}, packed, c.data(), s.n, 1.f};
  const double ms = P50Ms(runs, [&] {
    kiln::cpu::gemm::Run(bl, &pr, 1, s.m, s.n, s.k, threads > 1, threads, apack, {});
  });
  std::free(packed);
  std::free(apack);
  return ms;
}

double OneDnnMs(const Shape& s, std::vector<float>& a, std::vector<float>& b, int runs) {
  using dnnl::memory;
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream st(eng);
  const auto f32 = memory::data_type::f32;
  memory::desc a_md({s.m, s.k}, f32, memory::format_tag::ab);
  memory::desc b_any({s.k, s.n}, f32, memory::format_tag::any);
  memory::desc c_md({s.m, s.n}, f32, memory::format_tag::ab);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_any, c_md), eng);
  memory b_plain({{s.k, s.n}, f32, memory::format_tag::ab}, eng, b.data());
  memory b_packed(pd.weights_desc(), eng);
  dnnl::reorder(b_plain, b_packed).execute(st, b_plain, b_packed);
  memory am(a_md, eng, a.data()), cm(c_md, eng);
  dnnl::matmul mm(pd);
  std::printf("  (oneDNN: %s)", pd.impl_info_str());
  return P50Ms(runs, [&] {
    mm.execute(st, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, b_packed}, {DNNL_ARG_DST, cm}});
    st.wait();
  });
}

}  // namespace

int main(int argc, char** argv) {
  int threads = omp_get_max_threads(), runs = 50;
  std::vector<Shape> shapes;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--threads" && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else if (arg == "--runs" && i + 1 < argc) {
      runs = std::atoi(argv[++i]);
    } else {
      Shape s{};
      if (std::sscanf(arg.c_str(), "%ldx%ldx%ld", &s.m, &s.n, &s.k) != 3) {
        std::fprintf(stderr, "usage: gemm_bench [--threads T] [--runs R] MxNxK ...\n");
        return 2;
      }
      shapes.push_back(s);
    }
  }
  const kiln::cpu::IsaReport& isa = kiln::cpu::CpuIsa();
  omp_set_num_threads(threads);
  std::printf("isa: own %s, oneDNN %s; %d threads, p50 of %d runs\n",
              kiln::cpu::IsaName(isa.active), isa.onednn.c_str(), threads, runs);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  for (const Shape& s : shapes) {
    std::vector<float> a(s.m * s.k), b(s.k * s.n);
    for (float& x : a) x = d(rng);
    for (float& x : b) x = d(rng);
    std::printf("%ldx%ldx%ld:", s.m, s.n, s.k);
    const double dnnl_ms = OneDnnMs(s, a, b, runs);
    const double own_ms = OwnMs(s, a, b, threads, runs);
    const double gflop = 2e-6 * s.m * s.n * s.k;
    std::printf(" own %.4f ms (%.1f GFLOP/s), oneDNN %.4f ms (%.1f GFLOP/s), own/oneDNN %.2f\n",
                own_ms, gflop / own_ms, dnnl_ms, gflop / dnnl_ms, own_ms / dnnl_ms);
  }
  return 0;
}

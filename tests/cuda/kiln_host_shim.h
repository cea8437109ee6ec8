// Compiles generated CUDA kernel source (compiler/codegen) as host C++, for tests only: the
// kernels' index arithmetic, broadcasting and numerics then run on the CPU against the
// reference interpreter. The dialect is small (compiler/codegen/cuda_kernel.h): 1-D grids and
// blocks, static __shared__ arrays, __syncthreads. A launch walks the grid block by block;
// in a block that synchronizes, every thread is a fiber (ucontext) and __syncthreads switches
// to the next one, so a barrier is a real barrier: a thread leaving the kernel while others
// wait at one is reported (in CUDA that is a hang or undefined).
//
// Included first by the generated translation unit; nothing here is used by Kiln itself.
#pragma once

#include <math.h>
#include <string.h>
#include <ucontext.h>

#include <vector>

struct kiln_shim_dim3 {
  unsigned int x = 0, y = 0, z = 0;
};
static kiln_shim_dim3 threadIdx, blockIdx, blockDim, gridDim;

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
// One block runs at a time, so a block's shared array can be a function-level static.
#define __shared__ static

static inline float __int_as_float(int i) {
  float f;
  memcpy(&f, &i, sizeof f);
  return f;
}

namespace kiln_shim {

using Thunk = void (*)(void* const*);

struct Fiber {
  ucontext_t ctx;
  std::vector<char> stack;
  bool done = false;
};

static ucontext_t g_main;
static std::vector<Fiber> g_fibers;
static int g_current = 0;
static Thunk g_thunk = nullptr;
static void* const* g_args = nullptr;

static void Entry() {
  g_thunk(g_args);
  g_fibers[g_current].done = true;
  // Returning resumes uc_link (g_main).
}

// Runs one block's threads as fibers until all have returned. 0, or 1 when some threads
// returned while others waited at a barrier.
static int RunBlockAsFibers(unsigned int threads) {
  g_fibers.resize(threads);
  for (unsigned int t = 0; t < threads; ++t) {
    Fiber& f = g_fibers[t];
    f.done = false;
    f.stack.resize(64 * 1024);
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack.data();
    f.ctx.uc_stack.ss_size = f.stack.size();
    f.ctx.uc_link = &g_main;
    makecontext(&f.ctx, Entry, 0);
  }
  for (;;) {
    unsigned int done = 0, finished_now = 0;
    for (unsigned int t = 0; t < threads; ++t) {
      if (g_fibers[t].done) {
        ++done;
        continue;
      }
      g_current = static_cast<int>(t);
      threadIdx.x = t;
      swapcontext(&g_main, &g_fibers[t].ctx);
      if (g_fibers[t].done) {
        ++done;
        ++finished_now;
      }
    }
    if (done == threads) return 0;
    if (finished_now > 0 || done > 0) return 1;
  }
}

}  // namespace kiln_shim

static inline void __syncthreads() {
  swapcontext(&kiln_shim::g_fibers[kiln_shim::g_current].ctx, &kiln_shim::g_main);
}

// Launches `thunk` (which unpacks `args` and calls the kernel) over grid x block.
extern "C" int kiln_shim_launch(kiln_shim::Thunk thunk, void* const* args, unsigned int grid,
                                unsigned int block, int uses_barrier) {
  gridDim.x = grid;
  blockDim.x = block;
  kiln_shim::g_thunk = thunk;
  kiln_shim::g_args = args;
  for (unsigned int b = 0; b < grid; ++b) {
    blockIdx.x = b;
    if (!uses_barrier) {
      for (unsigned int t = 0; t < block; ++t) {
        threadIdx.x = t;
        thunk(args);
      }
      continue;
    }
    if (kiln_shim::RunBlockAsFibers(block) != 0) return 1;
  }
  return 0;
}

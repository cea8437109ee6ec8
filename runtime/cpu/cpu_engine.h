// The CPU backend: an Engine built from a CompiledGraph for one batch size. Convolutions,
// matrix products and pools run on oneDNN primitives (created once at build, weights
// prepacked); activations flow between conv-family primitives in the layout the primitives
// choose (blocked), reordered to plain only where a consumer needs it. Every other op runs
// its reference kernel (correct, slow, counted as fallback in EngineInfo).
//
// Run is not reentrant: the arenas are shared by every call, so one call at a time per engine
// (the server keeps one engine per worker). Threads: oneDNN and the own kernels run on
// OpenMP (Debian's oneDNN build); `threads` sets OpenMP's team size for the calling thread.
//
// This header is dependency-light on purpose: oneDNN appears only in runtime/cpu/*.cc.
#pragma once

#include <memory>

#include "base/status.h"
#include "compiler/compile.h"
#include "runtime/engine.h"

namespace kiln::cpu {

struct CpuEngineOptions {
  int threads = 0;  // 0: all cores (the OpenMP default)
  bool warm_up = true;
};

// The engine keeps its own clone of the graph (constants shared), so `compiled` may go away.
absl::StatusOr<std::unique_ptr<runtime::Engine>> BuildCpuEngine(
    const CompiledGraph& compiled, const CpuEngineOptions& options = {});

}  // namespace kiln::cpu

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
#include <optional>
#include <string>

#include "base/status.h"
#include "compiler/compile.h"
#include "runtime/engine.h"

namespace kiln::cpu {

// How convolution-family primitives lay out activations.
enum class ActivationLayout {
  kPrimitive,  // each primitive's preferred layout (oneDNN's `format_tag::any`)
  kBlocked,    // channels in blocks of 16 (nCw16c / nChw16c / nCdhw16c)
  kTune,       // build both, time them on this machine, keep the faster (tune.cc)
};

// "primitive" | "blocked" | "tune" (nullopt for anything else), and back.
std::optional<ActivationLayout> ParseActivationLayout(const std::string& name);
const char* ActivationLayoutName(ActivationLayout layout);

struct CpuEngineOptions {
  int threads = 0;  // 0: all cores (the OpenMP default at build)
  // Fewer than `threads`: a run's team unless the calling thread widens it
  // (runtime/run_width.h), so several engines may run side by side at this width and one
  // alone at `threads`. Only where every kernel follows the caller's team at run time
  // (CpuKernel::follows_team); otherwise the engine is built at run_threads. 0: `threads`.
  int run_threads = 0;
  // With more than one thread: also time a one-thread build of small engines and keep it
  // when faster (tune.h, TuneThreads).
  bool tune_threads = true;
  // One run on zero inputs at the end of the build, so the first real run is not the one
  // that faults the arena and weights in. Tuning warms what it times either way.
  bool warm_up = true;
  ActivationLayout layout = ActivationLayout::kTune;
  // 3x3 stride-1 convolutions may run Winograd's algorithm where oneDNN's heuristic picks
  // it, or where timed faster (below) (a relative error of a few 1e-7, like the direct
  // kernel's; guarded against non-finite inputs). Off: direct convolution only.
  bool winograd = true;
  // Where the heuristic keeps the direct kernel (below a batch of 4), a Winograd kernel is
  // timed against it at build and kept when faster (primitive_timing.h), within this much
  // build time per engine; 0: the heuristic alone.
  double winograd_trial_ms = 1000;
  // A graph with data-dependent shapes builds as a static region plus a dynamic region on
  // the reference (dynamic_engine.h), its outputs' sizes known only per run. Off: such a
  // graph is refused ("no static shape"). kilnd turns it on and refuses such a model only
  // where it would have to split a batch's outputs by rows.
  bool dynamic_shapes = false;
};

// The engine keeps its own clone of the graph (constants shared), so `compiled` may go away.
absl::StatusOr<std::unique_ptr<runtime::Engine>> BuildCpuEngine(
    const CompiledGraph& compiled, const CpuEngineOptions& options = {});

}  // namespace kiln::cpu

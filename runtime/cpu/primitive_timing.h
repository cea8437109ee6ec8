// Timing two oneDNN convolutions at build, for a choice oneDNN's heuristic leaves to its
// caller: its `convolution_auto` keeps the direct kernel below a batch of 4, where a Winograd
// kernel is often 2-3x faster on one image (and sometimes slower: small maps, few channels).
// Like cuDNN's "find" and TensorRT's tactic timing, the faster one on this CPU, at this
// shape and team size, is what the engine keeps (dnnl_conv.cc).
#pragma once

#include <dnnl.hpp>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "runtime/cpu/build_context.h"

namespace kiln::cpu {

// Work that runs on the second convolution's dst after it, timed as part of its run (the
// activations a primitive made without post-ops leaves to run after it).
using AfterRun = std::function<void(float* dst, int64_t floats)>;

struct PrimitiveTimes {
  std::vector<double> a_ms, b_ms;  // every timed run of each, in ms
};

// Runs both convolutions alternately on zero-filled buffers of their own descriptors (the
// values do not change a convolution's time; zeros are never denormal), at least kMinRounds
// times each after a warm-up run. nullopt when `ctx.trial_ms_left` is spent or their buffers
// together would pass kMaxTrialBytes (a trial must not be what exceeds a memory budget), or
// the build is stopped (CheckStop: its deadline, shutdown); the time taken is charged to
// `ctx.trial_ms_left`.
// `after_b` (when set) runs after each run of b and counts in b's time.
std::optional<PrimitiveTimes> TimeConvolutions(BuildContext& ctx,
                                               const dnnl::convolution_forward::primitive_desc& a,
                                               const dnnl::convolution_forward::primitive_desc& b,
                                               const AfterRun& after_b = nullptr);

inline constexpr int64_t kMaxTrialBytes = int64_t{128} << 20;
inline constexpr int kMinRounds = 5;

// Whether b's best run is under `gain` times a's; nullopt when either side's median run is
// over kMaxSpread times its best (the cores were shared: a run preempted by another process
// says nothing about the kernel), or there are fewer than kMinRounds runs.
inline constexpr double kMaxSpread = 1.5;
std::optional<bool> Judge(const PrimitiveTimes& t, double gain);

// What a convolution's time depends on, as a key for SecondFaster: the logical dims and
// layouts of src, weights and dst, the pads, the bias, the post-op kinds, the kernel oneDNN
// chose (which names the ISA) and the calling thread's team size.
std::string ConvTrialKey(const dnnl::convolution_forward::primitive_desc& pd,
                         const dnnl::post_ops& po, const dnnl::memory::dims& pad_begin,
                         const dnnl::memory::dims& pad_end);

// Whether `b` runs in under `gain` times `a`'s time. Decided once per `key` in the process
// (the caller's key names everything the times depend on: shapes, layouts, post-ops, team
// size): a model's repeated layers, the layout tuner's candidates, other batch sizes' engines
// and reloads ask the same question. A trial Judge leaves undecided is taken once more;
// nullopt when still undecided (noise), or not timed (budget, memory cap): not remembered.
std::optional<bool> SecondFaster(BuildContext& ctx, const std::string& key,
                                 const dnnl::convolution_forward::primitive_desc& a,
                                 const dnnl::convolution_forward::primitive_desc& b, double gain,
                                 const AfterRun& after_b = nullptr);

}  // namespace kiln::cpu

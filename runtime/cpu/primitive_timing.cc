#include "runtime/cpu/primitive_timing.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "base/elapsed.h"
#include "base/stop.h"

namespace kiln::cpu {
namespace {

using dnnl::memory;
using Clock = std::chrono::steady_clock;

// One convolution with its own zeroed buffers.
struct Trial {
  dnnl::convolution_forward prim;
  std::unordered_map<int, memory> args;
  AfterRun after;

  double Run(dnnl::stream& s) {
    const Clock::time_point t = Clock::now();
    prim.execute(s, args);
    s.wait();
    if (after) {
      const memory& dst = args.at(DNNL_ARG_DST);
      after(static_cast<float*>(dst.get_data_handle()),
            static_cast<int64_t>(dst.get_desc().get_size() / sizeof(float)));
    }
    return MsSince(t);
  }
};

int64_t BytesOf(const dnnl::convolution_forward::primitive_desc& pd) {
  return static_cast<int64_t>(pd.src_desc().get_size() + pd.weights_desc().get_size() +
                              pd.bias_desc().get_size() + pd.dst_desc().get_size() +
                              pd.scratchpad_desc().get_size());
}

Trial MakeTrial(const dnnl::engine& engine, const dnnl::convolution_forward::primitive_desc& pd) {
  Trial t{dnnl::convolution_forward(pd), {}, nullptr};
  const std::pair<int, memory::desc> descs[] = {{DNNL_ARG_SRC, pd.src_desc()},
                                                {DNNL_ARG_WEIGHTS, pd.weights_desc()},
                                                {DNNL_ARG_BIAS, pd.bias_desc()},
                                                {DNNL_ARG_DST, pd.dst_desc()},
                                                {DNNL_ARG_SCRATCHPAD, pd.scratchpad_desc()}};
  for (const auto& [arg, md] : descs) {
    if (md.get_size() == 0) continue;  // no bias, no scratchpad
    memory m(md, engine);
    std::memset(m.get_data_handle(), 0, md.get_size());
    t.args.emplace(arg, m);
  }
  return t;
}

// The process's decisions. Bounded: past kMaxDecisions keys, new ones are timed each time.
constexpr size_t kMaxDecisions = 4096;
std::mutex decisions_mu;
std::unordered_map<std::string, bool>& Decisions() {
  static auto* d = new std::unordered_map<std::string, bool>();
  return *d;
}

void AppendDims(std::string& key, const memory::dims& d) {
  for (memory::dim v : d) key += std::to_string(v) + ",";
  key += ";";
}

// Dims, then the layout: the block sizes and the strides of each dim.
void AppendDesc(std::string& key, const memory::desc& md) {
  AppendDims(key, md.dims());
  const dnnl_blocking_desc_t& b = md.data.format_desc.blocking;
  for (int i = 0; i < b.inner_nblks; ++i) key += "b" + std::to_string(b.inner_blks[i]);
  for (int i = 0; i < md.data.ndims; ++i) key += "s" + std::to_string(b.strides[i]);
  key += ";";
}

}  // namespace

std::string ConvTrialKey(const dnnl::convolution_forward::primitive_desc& pd,
                         const dnnl::post_ops& po, const memory::dims& pad_begin,
                         const memory::dims& pad_end) {
  std::string key = pd.impl_info_str();
  key += "|";
  AppendDesc(key, pd.src_desc());
  AppendDims(key, pd.weights_desc().dims());
  AppendDesc(key, pd.dst_desc());
  AppendDims(key, pad_begin);
  AppendDims(key, pad_end);
  key += pd.bias_desc().get_size() > 0 ? "bias" : "";
  for (int i = 0; i < po.len(); ++i) key += "/" + std::to_string(static_cast<int>(po.kind(i)));
  return key + " t" + std::to_string(omp_get_max_threads());
}

std::optional<PrimitiveTimes> TimeConvolutions(BuildContext& ctx,
                                               const dnnl::convolution_forward::primitive_desc& a,
                                               const dnnl::convolution_forward::primitive_desc& b,
                                               const AfterRun& after_b) {
  if (ctx.trial_ms_left <= 0 || BytesOf(a) + BytesOf(b) > kMaxTrialBytes || !CheckStop().ok()) {
    return std::nullopt;
  }
  const Clock::time_point start = Clock::now();
  dnnl::stream s(ctx.engine);
  Trial ta = MakeTrial(ctx.engine, a), tb = MakeTrial(ctx.engine, b);
  tb.after = after_b;
  // The first runs fault the buffers in and are not counted; they size the rest: rounds
  // enough for about 20 ms of both, within [kMinRounds, 7].
  const double first = ta.Run(s) + tb.Run(s);
  const int rounds = std::clamp(static_cast<int>(20.0 / std::max(first, 1e-3)), kMinRounds, 7);
  PrimitiveTimes t;
  for (int r = 0; r < rounds; ++r) {
    if (!CheckStop().ok()) {  // the build's deadline or shutdown: left undecided
      ctx.trial_ms_left -= MsSince(start);
      return std::nullopt;
    }
    // Alternating which goes first: neither always runs on the other's warm cache.
    if (r % 2 == 0) {
      t.a_ms.push_back(ta.Run(s));
      t.b_ms.push_back(tb.Run(s));
    } else {
      t.b_ms.push_back(tb.Run(s));
      t.a_ms.push_back(ta.Run(s));
    }
  }
  ctx.trial_ms_left -= MsSince(start);
  return t;
}

std::optional<bool> Judge(const PrimitiveTimes& t, double gain) {
  auto spread = [](std::vector<double> v, double* best) {
    std::sort(v.begin(), v.end());
    *best = v.front();
    return v[v.size() / 2] / std::max(v.front(), 1e-9);
  };
  if (t.a_ms.size() < static_cast<size_t>(kMinRounds) || t.a_ms.size() != t.b_ms.size()) {
    return std::nullopt;
  }
  double a = 0, b = 0;
  if (spread(t.a_ms, &a) > kMaxSpread || spread(t.b_ms, &b) > kMaxSpread) return std::nullopt;
  return b < gain * a;
}

std::optional<bool> SecondFaster(BuildContext& ctx, const std::string& key,
                                 const dnnl::convolution_forward::primitive_desc& a,
                                 const dnnl::convolution_forward::primitive_desc& b, double gain,
                                 const AfterRun& after_b) {
  {
    std::lock_guard<std::mutex> lock(decisions_mu);
    auto it = Decisions().find(key);
    if (it != Decisions().end()) return it->second;
  }
  // A noisy trial (another process on the cores) is taken again once, then left undecided
  // and not remembered: the heuristic serves this build, a later one times again.
  std::optional<bool> faster;
  for (int attempt = 0; attempt < 2 && !faster; ++attempt) {
    std::optional<PrimitiveTimes> t = TimeConvolutions(ctx, a, b, after_b);
    if (!t) return std::nullopt;
    faster = Judge(*t, gain);
  }
  if (!faster) return std::nullopt;
  std::lock_guard<std::mutex> lock(decisions_mu);
  if (Decisions().size() < kMaxDecisions) Decisions().emplace(key, *faster);
  return faster;
}

}  // namespace kiln::cpu

// The convolution kernel's run: the fast primitive, or its exact path when the guard cannot
// prove the input finite (nonfinite_guard.h), and the activations that run after it.
#include "runtime/cpu/dnnl_conv_kernel.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <unordered_map>

#include "runtime/cpu/epilogue_ops.h"
#include "runtime/cpu/nonfinite_guard.h"
#include "runtime/cpu/own_kernels.h"
#include "runtime/cpu/transient_heap.h"

namespace kiln::cpu {

using dnnl::memory;

// The bound of the output when every step's input stays within kSafeBound (then the fused
// primitive cannot have met a NaN or an overflow); +inf otherwise. `scan`: values no kernel
// recorded are scanned, else taken as unknown.
float ConvKernel::OutputBound(const ExecContext& ctx, bool scan) const {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  auto bound = [&](int slot, int64_t n) {
    const float known = ctx.bounds->Known(slot);
    return known < kInf || !scan ? known : ctx.bounds->Of(slot, ctx.ptrs[slot], n);
  };
  float xb = ctx.bounds->Known(x_slot);
  if (!(xb < kInf)) xb = bound(scan_slot, scan_floats);
  float b = (w_l1 * xb + b_max) * slack;
  for (const kiln_ops::EpilogueStep& s : steps) {
    if (!(b <= kSafeBound)) return kInf;
    b = s.op == "Add" ? b + bound(res_slot, res_floats) : ActivationBound(s, b);
  }
  return b <= kSafeBound ? b : kInf;
}

absl::Status ConvKernel::Run(const ExecContext& ctx) {
  const float out = OutputBound(ctx, guarded);
  if (residual_) RETURN_IF_ERROR(residual_->Run(ctx));
  if (epilogue_apart || (guarded && !(out <= kSafeBound))) return RunExact(ctx);
  RETURN_IF_ERROR(call_.Execute(ctx));
  if (!geometry.after.empty()) {
    RunActivations(geometry.after, static_cast<float*>(ctx.ptrs[dst_slot]), dst_floats);
  }
  if (out <= kSafeBound) {
    ctx.bounds->Set(dst_slot, out);
    ctx.bounds->Set(y_slot, out);  // the same values once a post reorder has run
  }
  return absl::OkStatus();
}

// Each thread's range in pieces that stay in its cache from one activation to the next.
void RunActivations(const std::vector<EpilogueActivation>& acts, float* y, int64_t n) {
  constexpr int64_t kPiece = 1 << 13;
  ForEachChunk(n, n >= kParallelElements, std::numeric_limits<int>::max(),
               [&](int, int64_t begin, int64_t end) {
                 for (int64_t i = begin; i < end; i += kPiece) {
                   const int64_t m = std::min(kPiece, end - i);
                   for (const EpilogueActivation& a : acts) ApplyActivation(a, y + i, m);
                 }
               });
}

absl::Status ConvKernel::MakeExact() {
  TransientHeap::Suspend off_pool;  // these objects outlive the run
  auto e = std::make_unique<ExactConv>();
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const ConvGeometry& g = geometry;
  dnnl::convolution_forward::desc d(
      dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, pd.src_desc(),
      memory::desc(pd.weights_desc().dims(), pd.weights_desc().data_type(),
                   memory::format_tag::any),
      g.bias_md, pd.dst_desc(), g.strides, g.dilations, g.pad_begin, g.pad_end);
  dnnl::convolution_forward::primitive_desc epd(d, attr, engine);
  e->prim = dnnl::convolution_forward(epd);
  e->weights = weights;
  if (epd.weights_desc() != pd.weights_desc()) {
    memory from = weights;
    if (g.winograd) {
      const memory::dims wd = epd.weights_desc().dims();
      from = memory(memory::desc(wd, memory::data_type::f32, PlainTag(wd.size())), engine,
                    const_cast<void*>(g.plain_weights.raw()));
    }
    e->weights = memory(epd.weights_desc(), engine);
    dnnl::stream s(engine);
    dnnl::reorder(from, e->weights).execute(s, from, e->weights);
    s.wait();
  }
  e->src_md = epd.src_desc();
  e->dst_md = epd.dst_desc();
  e->scratch_md = epd.scratchpad_desc();
  e->temp =
      NewAlignedBuffer<float>(static_cast<size_t>(dst_floats) * sizeof(float) + kBufferAlignment);
  e->scratch = NewAlignedBuffer<char>(e->scratch_md.get_size() + kBufferAlignment);
  if (!e->temp || !e->scratch) return absl::ResourceExhaustedError("conv exact path: OOM");
  exact_ = std::move(e);
  return absl::OkStatus();
}

// The convolution without post-ops into the temp (dst holds the residual, copied in or
// shared, for an Add step), then the steps in order with IEEE semantics.
absl::Status ConvKernel::RunExact(const ExecContext& ctx) {
  if (!exact_) {
    try {
      RETURN_IF_ERROR(MakeExact());
    } catch (const dnnl::error& e) {
      return absl::InternalError(std::string("conv exact path: oneDNN: ") + e.what());
    }
  }
  ExactConv& e = *exact_;
  std::unordered_map<int, memory> args = {
      {DNNL_ARG_SRC, memory(e.src_md, engine, ctx.ptrs[src_slot])},
      {DNNL_ARG_WEIGHTS, e.weights},
      {DNNL_ARG_DST, memory(e.dst_md, engine, e.temp.get())},
      {DNNL_ARG_SCRATCHPAD, memory(e.scratch_md, engine, e.scratch.get())}};
  if (bias) args.emplace(DNNL_ARG_BIAS, bias);
  e.prim.execute(*ctx.stream, args);
  float* t = e.temp.get();
  const float* y = static_cast<const float*>(ctx.ptrs[dst_slot]);
  for (const kiln_ops::EpilogueStep& s : steps) {
    if (s.op == "Add") {
      for (int64_t i = 0; i < dst_floats; ++i) t[i] += y[i];
    } else if (std::optional<EpilogueActivation> a = MakeEpilogueActivation(s)) {
      ApplyActivation(*a, t, dst_floats);
    } else {
      return absl::InternalError("conv exact path: no own kernel for " + s.op);
    }
  }
  std::memcpy(ctx.ptrs[dst_slot], t, dst_floats * sizeof(float));
  return absl::OkStatus();
}

}  // namespace kiln::cpu

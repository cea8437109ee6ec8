// The CPU engine: slot table, kernels (oneDNN, own, or reference fallback) in schedule order,
// the plan's arena plus a second arena for blocked layouts and kernel temps, and one shared
// oneDNN scratchpad. Run binds the caller's tensors into the slot table and runs the kernels.
#include "runtime/cpu/cpu_engine.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <set>

#include "base/aligned.h"
#include "base/stop.h"
#include "ops/evaluate.h"
#include "ops/interpreter.h"
#include "runtime/cpu/build_context.h"
#include "runtime/cpu/in_place_append.h"
#include "runtime/cpu/isa.h"
#include "runtime/cpu/serial_work.h"
#include "runtime/cpu/slot_table.h"
#include "runtime/cpu/transient_heap.h"
#include "runtime/cpu/tune.h"
#include "runtime/dynamic_engine.h"
#include "runtime/run_width.h"

namespace kiln::cpu {
namespace {

using AlignedBuffer = AlignedPtr<void>;

AlignedBuffer AllocAligned(int64_t bytes) {
  return NewAlignedBuffer(static_cast<size_t>(std::max<int64_t>(bytes, 0)));
}

class CpuEngine : public runtime::Engine {
 public:
  ~CpuEngine() override;
  absl::Status Build(const CompiledGraph& compiled, const CpuEngineOptions& options);
  void NoteTuning(double ms) { info_.tune_ms = ms; }
  // Whether every kernel splits its work by the caller's team at run time (follows_team).
  bool FollowsTeam() const {
    return std::all_of(kernels_.begin(), kernels_.end(),
                       [](const auto& k) { return k->follows_team(); });
  }
  // A run's team from now on unless the caller widens it (CpuEngineOptions::run_threads);
  // only for an engine that FollowsTeam.
  void SetRunThreads(int threads) {
    run_threads_ = std::clamp(threads, 1, threads_);
    info_.threads = run_threads_;
  }
  const runtime::EngineInfo& info() const override { return info_; }
  const std::vector<runtime::TensorSpec>& inputs() const override { return input_specs_; }
  const std::vector<runtime::TensorSpec>& outputs() const override { return output_specs_; }
  absl::Status Run(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) override {
    return RunWith(inputs, outputs, /*append_in_place=*/false);
  }
  std::vector<runtime::InPlaceAppend> in_place_appends() const override { return appends_; }
  absl::Status RunAppending(const std::vector<Tensor>& inputs,
                            std::vector<Tensor>& outputs) override {
    if (appends_.empty()) return runtime::Engine::RunAppending(inputs, outputs);
    RETURN_IF_ERROR(runtime::CheckTensors(output_specs_, outputs, "output",
                                          "an in-place append needs every output passed in"));
    return RunWith(inputs, outputs, /*append_in_place=*/true);
  }

 private:
  absl::Status RunWith(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs,
                       bool append_in_place);
  absl::Status BuildKernels();
  bool EvaluateAtBuild(Node& node);
  std::unique_ptr<CpuKernel> MakeFastKernel(const Node& node, KernelList& pre, KernelList& post);
  absl::Status Allocate(const plan::MemoryPlan& plan);
  absl::Status WarmUp();

  std::unique_ptr<Graph> graph_;
  BuildContext ctx_;
  SlotBindings bind_;
  std::vector<runtime::InPlaceAppend> appends_;
  dnnl::stream stream_;
  void AddKernel(std::unique_ptr<CpuKernel> k, std::string label) {
    kernels_.push_back(std::move(k));
    labels_.push_back(std::move(label));
  }
  absl::Status RunKernels(const ExecContext& ec);

  KernelList kernels_;
  std::vector<std::string> labels_;  // per kernel, for KILN_CPU_PROFILE
  std::vector<double> profile_ms_;   // per kernel, when profiling
  int64_t profiled_runs_ = 0;
  std::vector<void*> ptrs_;
  AlignedBuffer arena_, blocked_, scratch_;
  runtime::EngineInfo info_;
  std::vector<runtime::TensorSpec> input_specs_, output_specs_;
  int threads_ = 0;      // the team the kernels were built for: the most a run uses
  int run_threads_ = 0;  // a run's team outside a runtime::ScopedRunWidth
  // oneDNN's per-execute argument maps land here instead of the process heap, from the
  // second Run on (anything a library creates lazily on the first call stays on the heap).
  TransientHeap heap_;
  int64_t runs_ = 0;
  FiniteBounds bounds_;
};

// KILN_CPU_TRACE=1: names each node that falls back to the reference, with its operands.
void TraceFallback(const Node& node) {
  std::fprintf(stderr, "cpu fallback: %s", node.Describe().c_str());
  for (const Value* v : node.inputs) {
    if (!v) continue;
    std::fprintf(stderr, " %s%s", v->shape ? ShapeToString(*v->shape).c_str() : "?",
                 v->is_constant() ? "(const)" : "");
  }
  std::fprintf(stderr, "\n");
}

runtime::TensorSpec SpecOf(const Slot& s) { return {s.name, s.dtype, s.shape}; }

absl::Status CpuEngine::Build(const CompiledGraph& compiled, const CpuEngineOptions& options) {
  auto t0 = std::chrono::steady_clock::now();
  // A concrete team size, set before every build step and run: an engine must not inherit
  // whatever the calling thread's OpenMP setting was left at by another engine.
  threads_ = options.threads > 0 ? options.threads : omp_get_max_threads();
  omp_set_num_threads(threads_);
  run_threads_ = threads_;
  info_.threads = info_.max_threads = threads_;
  ctx_.layout = options.layout;
  ctx_.winograd = options.winograd;
  ctx_.follow_team = options.run_threads > 0 && options.run_threads < threads_;
  const double trial_budget_ms = options.winograd ? options.winograd_trial_ms : 0;
  ctx_.trial_ms_left = trial_budget_ms;
  info_.layout = ActivationLayoutName(options.layout);
  graph_ = compiled.graph->Clone();
  stream_ = dnnl::stream(ctx_.engine);
  ASSIGN_OR_RETURN(bind_, BuildSlots(*graph_, compiled.plan, ctx_));
  Slot scratch;
  scratch.name = "(scratchpad)";
  scratch.storage = Storage::kScratchpad;
  ctx_.slots.push_back(scratch);
  ctx_.scratch_slot = static_cast<int>(ctx_.slots.size()) - 1;
  for (int s : bind_.inputs) input_specs_.push_back(SpecOf(ctx_.slots[s]));
  for (int s : bind_.outputs) output_specs_.push_back(SpecOf(ctx_.slots[s]));
  ctx_.sole_read_inputs = SoleReadInputs(*graph_, bind_, ctx_);
  RETURN_IF_ERROR(BuildKernels());
  info_.trial_ms = trial_budget_ms - ctx_.trial_ms_left;
  appends_ = AppendsOf(ctx_, bind_);
  // All or none: a Concat whose pair was left out would still skip its input in place.
  if (appends_.size() != ctx_.appends.size()) appends_.clear();
  RETURN_IF_ERROR(Allocate(compiled.plan));
  info_.device = "cpu";
  info_.batch = input_specs_.empty() || input_specs_[0].shape.empty()
                    ? 1 : input_specs_[0].shape[0];
  info_.weight_bytes = ctx_.weight_bytes;
  info_.shared_weight_bytes = ctx_.shared_weight_bytes;
  // The warm-up touches every buffer and primes oneDNN's JIT; on all-zero inputs a fallback
  // op may legitimately refuse (integer division by zero), which says nothing about the
  // engine, so its status is not an error.
  if (options.warm_up) WarmUp().IgnoreError();
  info_.build_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return absl::OkStatus();
}

std::unique_ptr<CpuKernel> CpuEngine::MakeFastKernel(const Node& node, KernelList& pre,
                                                      KernelList& post) {
  using Factory = std::unique_ptr<CpuKernel> (*)(BuildContext&, const Node&);
  static const Factory kFast[] = {MakeDnnlBinary, MakeOwnKernel,   MakeDnnlConv,
                                  MakeDnnlQConv,  MakeDnnlQMatMul, MakeFewRowsKernel,
                                  MakeDnnlMatMul, MakeGemmKernel,  MakeDnnlPool};
  // A factory that gives up may already have moved an output to the blocked arena.
  std::vector<std::pair<int, Slot>> saved;
  for (const Value* v : node.outputs) {
    if (ctx_.SlotOf(v) >= 0) saved.push_back({ctx_.SlotOf(v), ctx_.slots[ctx_.SlotOf(v)]});
  }
  for (Factory f : kFast) {
    std::unique_ptr<CpuKernel> k;
    try {
      k = f(ctx_, node);
    } catch (const dnnl::error&) {
      k = nullptr;  // a primitive oneDNN cannot make here: the reference runs it
    }
    if (k) return k;
    pre.clear();
    post.clear();
    for (const auto& [id, slot] : saved) ctx_.slots[id] = slot;
  }
  return nullptr;
}

// A node whose inputs are all constant computes the same tensors every run: it is evaluated
// once, here, and its outputs become constants of the engine (no kernel). The optimizer's
// fold_constants leaves such nodes in the graph when folding would inflate the model file
// (Swin's [windows, 49, 49] shift mask from a few small constants); in memory the value
// exists either way. False when the node is not such a node or its reference kernel fails.
bool CpuEngine::EvaluateAtBuild(Node& node) {
  if (node.inputs.empty()) return false;
  absl::StatusOr<std::vector<Tensor>> outs = ref::EvaluateConstantNode(node);
  if (!outs.ok() || outs->size() < node.outputs.size()) return false;
  for (size_t k = 0; k < node.outputs.size(); ++k) {
    Value* v = node.outputs[k];
    const int s = ctx_.SlotOf(v);
    if (!v || s < 0) continue;
    if ((*outs)[k].dtype() != ctx_.slots[s].dtype || (*outs)[k].shape() != ctx_.slots[s].shape) {
      return false;
    }
  }
  for (size_t k = 0; k < node.outputs.size(); ++k) {
    Value* v = node.outputs[k];
    const int s = ctx_.SlotOf(v);
    if (!v || s < 0) continue;
    v->constant = std::move((*outs)[k]);
    ctx_.slots[s].storage = Storage::kConstant;
    ctx_.slots[s].blocked_ok = false;
    // A constant is plain: a layout PlanLayoutTransposes gave the slot no longer holds.
    ctx_.slots[s].md = dnnl::memory::desc();
    ctx_.slots[s].request = -1;
  }
  ++info_.build_time_evaluated;
  return true;
}

absl::Status CpuEngine::BuildKernels() {
  std::set<std::string> fallback_types;
  const auto& nodes = graph_->nodes();
  for (size_t i = 0; i < nodes.size(); ++i) {
    Node& node = *nodes[i];
    ctx_.step = static_cast<int64_t>(i);
    if (EvaluateAtBuild(node)) continue;
    KernelList pre, post;
    ctx_.pre = &pre;
    ctx_.post = &post;
    // Small primitives run on one thread: waking a second costs more than it saves. They
    // are also created that way (oneDNN partitions work for the thread count at creation).
    const bool serial = IsSmallWork(node);
    const int team = omp_get_max_threads();
    if (serial) omp_set_num_threads(1);
    std::unique_ptr<CpuKernel> k = MakeFastKernel(node, pre, post);
    if (serial) omp_set_num_threads(team);
    if (k && serial) {
      for (auto& p : pre) p = std::make_unique<SerialKernel>(std::move(p));
      k = std::make_unique<SerialKernel>(std::move(k));
      for (auto& p : post) p = std::make_unique<SerialKernel>(std::move(p));
    }
    if (!k) {
      if (std::getenv("KILN_CPU_TRACE")) TraceFallback(node);
      k = MakeFallback(ctx_, node);
      ++info_.fallback_ops;
      fallback_types.insert(node.domain.empty() ? node.op_type : node.domain + "." + node.op_type);
    }
    // The products a quantized graph computes on integers (fuse_qdq's, or the model's own).
    if (node.domain.empty() && (node.op_type == "QLinearConv" || node.op_type == "QLinearMatMul")) {
      ++info_.int8_ops;
    }
    const int y = ctx_.SlotOf(node.output(0));
    const std::string label = (k->is_fallback() ? "[ref] " : "") + node.op_type + " " +
                              node.name + (y < 0 ? "" : " " + ShapeToString(ctx_.slots[y].shape));
    info_.layout_reorders += static_cast<int>(pre.size() + post.size());
    for (auto& p : pre) AddKernel(std::move(p), "(reorder in) " + node.name);
    AddKernel(std::move(k), label);
    for (auto& p : post) AddKernel(std::move(p), "(reorder out) " + node.name);
  }
  ctx_.pre = ctx_.post = nullptr;
  info_.total_ops = static_cast<int>(nodes.size());
  info_.fallback_op_types.assign(fallback_types.begin(), fallback_types.end());
  info_.slow_ops = ctx_.slow_ops;
  info_.bf16_ops = ctx_.bf16_ops;
  info_.winograd_ops = ctx_.winograd_ops;
  info_.free_transposes = ctx_.free_transposes;
  info_.activations_after = ctx_.activations_after;
  info_.isa = std::string(IsaName(ActiveIsa())) + " (oneDNN " + CpuIsa().onednn + ")";
  return absl::OkStatus();
}

absl::Status CpuEngine::Allocate(const plan::MemoryPlan& plan) {
  ASSIGN_OR_RETURN(plan::BufferAssignment blocked, plan::AssignBuffers(ctx_.requests));
  arena_ = AllocAligned(plan.arena_bytes);
  blocked_ = AllocAligned(blocked.arena_bytes);
  scratch_ = AllocAligned(ctx_.scratchpad_bytes);
  if (!arena_ || !blocked_ || !scratch_) return absl::ResourceExhaustedError("cpu engine: OOM");
  info_.arena_bytes = plan.arena_bytes + blocked.arena_bytes + ctx_.scratchpad_bytes;
  ptrs_.assign(ctx_.slots.size(), nullptr);
  bounds_.Resize(ctx_.slots.size());
  char* arena = static_cast<char*>(arena_.get());
  char* barena = static_cast<char*>(blocked_.get());
  for (size_t i = 0; i < ctx_.slots.size(); ++i) {
    const Slot& s = ctx_.slots[i];
    if (s.storage == Storage::kArena) ptrs_[i] = arena + s.offset;
    if (s.storage == Storage::kBlocked) ptrs_[i] = barena + blocked.offsets[s.request];
    if (s.storage == Storage::kScratchpad) ptrs_[i] = scratch_.get();
    if (s.storage == Storage::kConstant) {
      const Value* v = graph_->FindValue(s.name);
      ptrs_[i] = const_cast<void*>(v->constant->raw());
    }
  }
  return absl::OkStatus();
}

absl::Status CpuEngine::WarmUp() {
  std::vector<Tensor> ins, outs;
  for (const auto& spec : input_specs_) {
    if (DTypeSize(spec.dtype) == 0) return absl::OkStatus();
    ins.emplace_back(spec.dtype, spec.shape);
  }
  return Run(ins, outs);
}

absl::Status CpuEngine::RunWith(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs,
                                bool append_in_place) {
  RETURN_IF_ERROR(runtime::CheckInputs(input_specs_, inputs));
  // OpenMP's thread count is a per-thread setting: Run may come from another thread than Build.
  const int width = runtime::RunWidth();
  omp_set_num_threads(width > 0 ? std::min(width, threads_) : run_threads_);
  outputs.resize(output_specs_.size());
  for (size_t k = 0; k < outputs.size(); ++k) {
    const auto& spec = output_specs_[k];
    if (outputs[k].dtype() != spec.dtype || outputs[k].shape() != spec.shape) {
      // Zeroed, though every output is written whole (cpu_engine_test runs over NaN-filled
      // outputs): left uninitialized, `kiln bench` of a decoder step (decoder_step.py, hidden
      // 256, past 128) took 6.4 ms instead of 0.85-1.8, its pages then first touched inside
      // the parallel kernels.
      outputs[k] = Tensor(spec.dtype, spec.shape);
    }
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    ptrs_[bind_.inputs[i]] = const_cast<void*>(inputs[i].raw());
  }
  for (size_t k = 0; k < outputs.size(); ++k) {
    const int s = bind_.outputs[k];
    if (ctx_.slots[s].storage == Storage::kOutput) ptrs_[s] = outputs[k].raw_mutable();
  }
  for (const auto& [view, root] : bind_.views) ptrs_[view] = ptrs_[root];
  bounds_.NewRun();
  ExecContext ec{ptrs_.data(), &stream_, &bounds_, append_in_place};
  {
    // Only the kernels run in the scope: output tensors outlive Run and belong on the heap.
    std::optional<TransientHeap::Scope> scope;
    if (runs_++ > 0) scope.emplace(heap_);
    RETURN_IF_ERROR(RunKernels(ec));
  }
  // Outputs that are graph inputs, constants, or a repeat of an earlier output.
  for (size_t k = 0; k < outputs.size(); ++k) {
    void* src = ptrs_[bind_.outputs[k]];
    if (src != outputs[k].raw_mutable() && outputs[k].nbytes() > 0) {
      std::memcpy(outputs[k].raw_mutable(), src, outputs[k].nbytes());
    }
  }
  return absl::OkStatus();
}

// KILN_CPU_PROFILE=1: time every kernel; the engine prints the costliest (with their output
// shapes) when destroyed. The first run is not timed: it faults in the arena and primes
// oneDNN (efficientnet_b0 b8's 112x112 convolutions took 27 ms in it, 1.5 ms after), and
// counted in it inflated the early, large layers' averages two-fold.
absl::Status CpuEngine::RunKernels(const ExecContext& ec) {
  static const bool profile = std::getenv("KILN_CPU_PROFILE") != nullptr;
  if (StopActive()) {  // a load-time run (warm-up, tuning, check): may be stopped between kernels
    for (auto& k : kernels_) {
      RETURN_IF_ERROR(CheckStop());
      RETURN_IF_ERROR(k->Run(ec));
    }
    return absl::OkStatus();
  }
  if (!profile || runs_ <= 1) {
    for (auto& k : kernels_) RETURN_IF_ERROR(k->Run(ec));
    return absl::OkStatus();
  }
  profile_ms_.resize(kernels_.size(), 0.0);
  ++profiled_runs_;
  for (size_t i = 0; i < kernels_.size(); ++i) {
    auto t0 = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(kernels_[i]->Run(ec));
    profile_ms_[i] +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  return absl::OkStatus();
}

CpuEngine::~CpuEngine() {
  if (profile_ms_.empty() || profiled_runs_ == 0) return;
  std::vector<size_t> order(profile_ms_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return profile_ms_[a] > profile_ms_[b]; });
  double total = 0.0;
  for (double t : profile_ms_) total += t;
  std::fprintf(stderr, "cpu engine profile: %.3f ms/run over %zu kernels\n",
               total / profiled_runs_, kernels_.size());
  // KILN_CPU_PROFILE=all lists every kernel, not just the 20 costliest.
  const char* mode = std::getenv("KILN_CPU_PROFILE");
  const bool all = mode && std::strcmp(mode, "all") == 0;
  for (size_t i = 0; i < std::min<size_t>(order.size(), all ? order.size() : 20); ++i) {
    std::fprintf(stderr, "  %8.3f ms  %s\n", profile_ms_[order[i]] / profiled_runs_,
                 labels_[order[i]].c_str());
  }
}

}  // namespace

namespace {

constexpr int64_t kThreadTuningWork = int64_t{32} << 20;

// One engine with a concrete layout (kPrimitive or kBlocked).
absl::StatusOr<std::unique_ptr<CpuEngine>> BuildOne(const CompiledGraph& compiled,
                                                    CpuEngineOptions options, ActivationLayout layout) {
  options.layout = layout;
  auto engine = std::make_unique<CpuEngine>();
  try {
    RETURN_IF_ERROR(engine->Build(compiled, options));
  } catch (const dnnl::error& e) {
    return absl::InternalError(std::string("cpu engine: oneDNN: ") + e.what());
  }
  return engine;
}

}  // namespace

std::optional<ActivationLayout> ParseActivationLayout(const std::string& name) {
  if (name == "primitive") return ActivationLayout::kPrimitive;
  if (name == "blocked") return ActivationLayout::kBlocked;
  if (name == "tune") return ActivationLayout::kTune;
  return std::nullopt;
}

const char* ActivationLayoutName(ActivationLayout layout) {
  switch (layout) {
    case ActivationLayout::kPrimitive: return "primitive";
    case ActivationLayout::kBlocked: return "blocked";
    case ActivationLayout::kTune: return "tune";
  }
  return "?";
}

absl::StatusOr<std::unique_ptr<runtime::Engine>> BuildCpuEngine(const CompiledGraph& compiled,
                                                                 const CpuEngineOptions& options) {
  if (!compiled.graph) return absl::InvalidArgumentError("cpu engine: no graph");
  RETURN_IF_ERROR(ref::CheckSupported(*compiled.graph));  // fallbacks and bodies need kernels
  CpuIsa();  // the ISA cap reaches oneDNN before its first primitive
  if (options.dynamic_shapes && HasDynamicShapes(*compiled.graph)) {
    // Shapes known only per run: the static region comes back through this function (its
    // sub-graph is all static, so one level deep), the rest runs on the reference.
    const char* layout = options.layout == ActivationLayout::kTune
                             ? ActivationLayoutName(ActivationLayout::kPrimitive)
                             : ActivationLayoutName(options.layout);
    return runtime::BuildDynamicEngine(
        compiled, [&](const CompiledGraph& part) { return BuildCpuEngine(part, options); }, "cpu",
        layout);
  }
  if (std::optional<CpuEngineOptions> narrow = NarrowAtOnce(*compiled.graph, options)) {
    const int team = omp_get_max_threads();  // the calling thread's, which a build sets
    auto engine = BuildCpuEngine(compiled, *narrow);
    omp_set_num_threads(team);
    return engine;
  }
  auto build_with = [&](const CpuEngineOptions& o, ActivationLayout layout)
      -> absl::StatusOr<std::unique_ptr<runtime::Engine>> {
    ASSIGN_OR_RETURN(auto engine, BuildOne(compiled, o, layout));
    return std::unique_ptr<runtime::Engine>(std::move(engine));
  };
  auto build = [&](ActivationLayout layout) { return build_with(options, layout); };
  TuneResult tuned;
  if (options.layout == ActivationLayout::kTune) {
    ASSIGN_OR_RETURN(tuned, TuneLayout(*compiled.graph, build));
  } else {
    tuned.layout = options.layout;
    ASSIGN_OR_RETURN(tuned.engine, build(options.layout));
  }
  const int team = omp_get_max_threads();
  if (options.tune_threads && tuned.engine->info().threads > 1 &&
      EstimatedWork(*compiled.graph) < kThreadTuningWork) {
    ThreadResult t = TuneThreads(std::move(tuned.engine), [&]() {
      CpuEngineOptions one = options;
      one.threads = 1;
      auto e = build_with(one, tuned.layout);
      omp_set_num_threads(team);  // the candidate's build set this thread's team to 1
      return e;
    });
    tuned.engine = std::move(t.engine);
    tuned.tune_ms += t.tune_ms;
  }
  auto* engine = static_cast<CpuEngine*>(tuned.engine.get());
  if (tuned.tune_ms > 0) engine->NoteTuning(tuned.tune_ms);
  if (options.run_threads > 0 && options.run_threads < engine->info().max_threads &&
      !engine->FollowsTeam()) {
    CpuEngineOptions narrow = options;  // the team cannot change per run: build it narrow
    narrow.threads = options.run_threads;
    narrow.run_threads = 0;
    narrow.tune_threads = false;
    ASSIGN_OR_RETURN(tuned.engine, build_with(narrow, tuned.layout));
    omp_set_num_threads(team);
  } else if (options.run_threads > 0) {
    engine->SetRunThreads(options.run_threads);  // tuned at the wide team, run narrow
  }
  return std::move(tuned.engine);
}

}  // namespace kiln::cpu

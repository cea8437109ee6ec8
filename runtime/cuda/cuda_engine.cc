// The CUDA engine: node plans (node_plan.h) become steps bound to device pointers
// (device_arena.h); generated kernels are compiled as one NVRTC module; a warm-up run checks
// everything, then the run is captured as a CUDA graph (graph_capture.h). Run stages the
// inputs, replays the graph, synchronises once and drains the outputs.
#include "runtime/cuda/cuda_engine.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <set>
#include <sstream>

#include "compiler/codegen/cuda_kernel.h"
#include "ops/interpreter.h"
#include "runtime/cuda/cuda_libs.h"
#include "runtime/cuda/cuda_status.h"
#include "runtime/cuda/device_arena.h"
#include "runtime/cuda/graph_capture.h"
#include "runtime/cuda/node_plan.h"
#include "runtime/cuda/nvrtc_compiler.h"
#include "runtime/cuda/steps.h"
#include "runtime/dynamic_engine.h"

namespace kiln::cuda {
namespace {

constexpr char kTuningPrefix[] = "cudnn-algos:";

std::vector<int> ParseTuning(const std::string& s) {
  std::vector<int> algos;
  if (s.rfind(kTuningPrefix, 0) != 0) return algos;
  std::stringstream in(s.substr(sizeof kTuningPrefix - 1));
  std::string item;
  while (std::getline(in, item, ',')) {
    try {
      algos.push_back(std::stoi(item));
    } catch (const std::exception&) {
      return {};  // malformed: measure again
    }
  }
  return algos;
}

std::string FormatTuning(const std::vector<int>& algos) {
  std::string s = kTuningPrefix;
  for (size_t i = 0; i < algos.size(); ++i) s += (i ? "," : "") + std::to_string(algos[i]);
  return s;
}

runtime::TensorSpec SpecOf(const Value* v) { return {v->name, v->dtype, StaticDims(*v->shape)}; }

class CudaEngine : public runtime::Engine {
 public:
  ~CudaEngine() override;
  absl::Status Build(const CompiledGraph& compiled, const CudaEngineOptions& options);
  const runtime::EngineInfo& info() const override { return info_; }
  const std::vector<runtime::TensorSpec>& inputs() const override { return input_specs_; }
  const std::vector<runtime::TensorSpec>& outputs() const override { return output_specs_; }
  absl::Status Run(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) override;

 private:
  absl::Status SelectDevice();
  absl::Status PlanNodes();
  absl::Status CreateLibraries();
  absl::Status MakeSteps();
  absl::Status AddNodeSteps(size_t index, const Node& node, const NodePlan& plan);
  absl::StatusOr<std::unique_ptr<Step>> MakeConvOrPlain(size_t index, const Node& node, const NodePlan& plan,
                                                        std::vector<codegen::Kernel>& kernels);
  absl::StatusOr<bool> AddLibraryStep(const Node& node, absl::StatusOr<std::unique_ptr<Step>> made);
  absl::Status LoadKernels();
  absl::Status Enqueue();
  absl::Status WarmUpAndCapture();

  std::unique_ptr<Graph> graph_;
  CudaEngineOptions options_;
  BuildContext ctx_;
  HostErrors host_errors_;
  std::vector<NodePlan> plans_;
  DeviceArena mem_;
  DeviceBuffer workspace_, find_workspace_, zeros_;
  StepList steps_;
  std::vector<std::string> step_names_;  // the node (or copy) of each step, for errors
  cudaStream_t stream_ = nullptr;
  cudaLibrary_t library_ = nullptr;
  CapturedRun captured_;
  runtime::EngineInfo info_;
  std::vector<runtime::TensorSpec> input_specs_, output_specs_;
};

// FAILED_PRECONDITION unless GPU `device` exists (no driver: the runtime's error).
absl::Status CheckDeviceUsable(int device) {
  int count = 0;
  KILN_CUDA(cudaGetDeviceCount(&count));
  if (device < 0 || device >= count) {
    return absl::FailedPreconditionError("no GPU " + std::to_string(device) +
                                         " (this machine has " + std::to_string(count) + ")");
  }
  return absl::OkStatus();
}

absl::Status CudaEngine::SelectDevice() {
  RETURN_IF_ERROR(CheckDeviceUsable(options_.device));
  ctx_.device = options_.device;
  KILN_CUDA(cudaSetDevice(options_.device));
  KILN_CUDA(cudaGetDeviceProperties(&ctx_.prop, options_.device));
  return absl::OkStatus();
}

absl::Status CudaEngine::PlanNodes() {
  std::set<std::string> fallback_types;
  const auto& nodes = graph_->nodes();
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = *nodes[i];
    const std::string name = codegen::Identifier("n" + std::to_string(i) + "_" + n.op_type);
    ASSIGN_OR_RETURN(NodePlan p, PlanNode(n, name, {options_.fuse_activations}));
    if (p.kind == NodeKind::kFallback) {
      ++info_.fallback_ops;
      fallback_types.insert(n.domain.empty() ? n.op_type : n.domain + "." + n.op_type);
    }
    plans_.push_back(std::move(p));
  }
  info_.total_ops = static_cast<int>(nodes.size());
  info_.fallback_op_types.assign(fallback_types.begin(), fallback_types.end());
  return absl::OkStatus();
}

absl::Status CudaEngine::CreateLibraries() {
  KILN_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  KILN_CUDNN(Dnn().cudnnCreate(&ctx_.cudnn));
  KILN_CUDNN(Dnn().cudnnSetStream(ctx_.cudnn, stream_));
  KILN_CUBLAS(Lt().cublasLtCreate(&ctx_.lt));
  ctx_.tf32 = options_.tf32;
  ctx_.host_errors = &host_errors_;
  ctx_.ptrs = mem_.ptrs;
  ctx_.given_algos = ParseTuning(options_.tuning);
  // The bias of fused convolutions that have none: zeros for the widest output.
  for (const NodePlan& p : plans_) {
    if (p.kind == NodeKind::kConv) ctx_.zeros_bytes = std::max<size_t>(ctx_.zeros_bytes, p.conv.y_dims[1] * sizeof(float));
  }
  if (ctx_.zeros_bytes > 0) {
    // Room to measure convolution algorithms: a quarter of what is free, at most 1 GiB.
    size_t free_bytes = 0, total_bytes = 0;
    KILN_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
    ctx_.find_workspace_bytes = std::min<size_t>(free_bytes / 4, size_t{1} << 30);
    ASSIGN_OR_RETURN(find_workspace_, DeviceBuffer::Allocate(ctx_.find_workspace_bytes));
    ctx_.find_workspace = find_workspace_.get();
  }
  ASSIGN_OR_RETURN(zeros_, DeviceBuffer::Allocate(ctx_.zeros_bytes));
  KILN_CUDA(cudaMemset(zeros_.get(), 0, zeros_.bytes()));
  ctx_.zeros = zeros_.get();
  return absl::OkStatus();
}

absl::Status CudaEngine::AddNodeSteps(size_t index, const Node& node, const NodePlan& plan) {
  std::vector<codegen::Kernel> kernels = plan.kernels;
  switch (plan.kind) {
    case NodeKind::kView: {
      ASSIGN_OR_RETURN(void* in, ctx_.Ptr(node.input(0)));
      ASSIGN_OR_RETURN(void* out, ctx_.Ptr(node.output(0)));
      const Value* y = node.output(0);
      const size_t bytes = static_cast<size_t>(NumElements(StaticDims(*y->shape))) * DTypeSize(y->dtype);
      steps_.push_back(MakeCopyStep(out, in, bytes, cudaMemcpyDeviceToDevice));
      return absl::OkStatus();
    }
    case NodeKind::kConv: {
      ASSIGN_OR_RETURN(const bool on_library, AddLibraryStep(node, MakeConvOrPlain(index, node, plan, kernels)));
      if (!on_library) return absl::OkStatus();
      break;
    }
    case NodeKind::kMatmul: {
      ASSIGN_OR_RETURN(const bool on_library, AddLibraryStep(node, MakeMatmulStep(ctx_, node, plan.matmul)));
      if (!on_library) return absl::OkStatus();
      break;
    }
    case NodeKind::kGenerated:
      break;
    case NodeKind::kFallback: {
      ASSIGN_OR_RETURN(std::unique_ptr<Step> s, MakeFallbackStep(ctx_, node));
      steps_.push_back(std::move(s));
      return absl::OkStatus();
    }
  }
  // Generated kernels: the node's own, or a library call's epilogue.
  ASSIGN_OR_RETURN(StepList ks, MakeKernelSteps(ctx_, node, kernels));
  for (auto& k : ks) steps_.push_back(std::move(k));
  return absl::OkStatus();
}

// The convolution's step. When cuDNN refuses the fused call (no algorithm it takes), the
// plain convolution and a generated kernel for the whole epilogue instead (`kernels` then
// become that plan's), noted in slow_ops; UNIMPLEMENTED when cuDNN refuses that too.
absl::StatusOr<std::unique_ptr<Step>> CudaEngine::MakeConvOrPlain(size_t index, const Node& node, const NodePlan& plan,
                                                                  std::vector<codegen::Kernel>& kernels) {
  absl::StatusOr<std::unique_ptr<Step>> made = MakeConvStep(ctx_, node, plan.conv);
  if (made.ok() || !absl::IsUnimplemented(made.status()) || !plan.conv.fused) return made;
  const std::string name = codegen::Identifier("n" + std::to_string(index) + "_" + node.op_type + "_plain");
  ASSIGN_OR_RETURN(NodePlan plain, PlanNode(node, name, {.fuse_activations = false}));
  if (plain.kind != NodeKind::kConv) return made;
  // The refused attempt left its slot (-1) in the cached algorithm list; the retry takes it.
  if (!ctx_.chosen_algos.empty() && ctx_.chosen_algos.back() == -1) ctx_.chosen_algos.pop_back();
  absl::StatusOr<std::unique_ptr<Step>> unfused = MakeConvStep(ctx_, node, plain.conv);
  if (!unfused.ok()) return unfused;
  info_.slow_ops.push_back(node.op_type + " (unfused: " + std::string(made.status().message()) + ")");
  kernels = std::move(plain.kernels);
  return unfused;
}

// A library call's step, or, when the library refuses the node at build (no cuDNN algorithm
// it takes, an empty cuBLASLt heuristic, NOT_SUPPORTED: all UNIMPLEMENTED), the whole node on
// the host fallback, reported in slow_ops: a slower engine, never a failed model. False when
// the node fell back (its epilogue kernels are then not needed).
absl::StatusOr<bool> CudaEngine::AddLibraryStep(const Node& node, absl::StatusOr<std::unique_ptr<Step>> made) {
  if (made.ok()) {
    steps_.push_back(std::move(*made));
    return true;
  }
  if (!absl::IsUnimplemented(made.status())) return made.status();
  ASSIGN_OR_RETURN(std::unique_ptr<Step> fallback, MakeFallbackStep(ctx_, node));
  steps_.push_back(std::move(fallback));
  ++info_.fallback_ops;
  const std::string type = node.domain.empty() ? node.op_type : node.domain + "." + node.op_type;
  if (std::find(info_.fallback_op_types.begin(), info_.fallback_op_types.end(), type) == info_.fallback_op_types.end()) {
    info_.fallback_op_types.push_back(type);
  }
  info_.slow_ops.push_back(node.op_type + " (host: " + std::string(made.status().message()) + ")");
  return false;
}

// The run: inputs from pinned staging, the nodes' steps, outputs to pinned staging.
absl::Status CudaEngine::MakeSteps() {
  for (size_t i = 0; i < mem_.in_device.size(); ++i) {
    steps_.push_back(MakeCopyStep(mem_.in_device[i], mem_.in_host[i], mem_.in_bytes[i], cudaMemcpyHostToDevice));
  }
  const auto& nodes = graph_->nodes();
  step_names_.assign(steps_.size(), "input copy");
  for (size_t i = 0; i < nodes.size(); ++i) {
    absl::Status st = AddNodeSteps(i, *nodes[i], plans_[i]);
    if (!st.ok()) return absl::Status(st.code(), nodes[i]->Describe() + ": " + std::string(st.message()));
    step_names_.resize(steps_.size(), nodes[i]->Describe());
  }
  for (size_t k = 0; k < mem_.out_device.size(); ++k) {
    steps_.push_back(MakeCopyStep(mem_.out_host[k], mem_.out_device[k], mem_.out_bytes[k], cudaMemcpyDeviceToHost));
  }
  step_names_.resize(steps_.size(), "output copy");
  find_workspace_ = DeviceBuffer();  // measuring is over
  ctx_.find_workspace = nullptr;
  ASSIGN_OR_RETURN(workspace_, DeviceBuffer::Allocate(ctx_.workspace_bytes));
  ctx_.workspace = workspace_.get();
  info_.layout = FormatTuning(ctx_.chosen_algos);
  return absl::OkStatus();
}

absl::Status CudaEngine::LoadKernels() {
  ctx_.handles.assign(ctx_.kernels.size(), nullptr);
  if (ctx_.kernels.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(const std::string arch, ArchFor(ctx_.prop.major, ctx_.prop.minor));
  ASSIGN_OR_RETURN(std::shared_ptr<const CompiledModule> m,
                   CompileModule(codegen::ModuleSource(ctx_.kernels), arch, "kiln_engine"));
  KILN_CUDA(cudaLibraryLoadData(&library_, m->image.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  for (size_t i = 0; i < ctx_.kernels.size(); ++i) {
    KILN_CUDA(cudaLibraryGetKernel(&ctx_.handles[i], library_, ctx_.kernels[i].name.c_str()));
  }
  info_.isa = std::string(ctx_.prop.name) + " sm_" + std::to_string(ctx_.prop.major) +
              std::to_string(ctx_.prop.minor) + ", " + std::to_string(ctx_.kernels.size()) +
              " generated kernels (" + arch + ", " + std::to_string(static_cast<int>(m->compile_ms)) + " ms)";
  return absl::OkStatus();
}

absl::Status CudaEngine::Enqueue() {
  for (size_t i = 0; i < steps_.size(); ++i) {
    absl::Status st = steps_[i]->Enqueue(stream_);
    // Debugging: a fault surfaces at the step that caused it, not at the run's one sync.
    if (st.ok() && options_.debug_sync) st = CudaStatus(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    if (!st.ok()) {
      return absl::Status(st.code(), "step " + std::to_string(i) + " (" + step_names_[i] + "): " + std::string(st.message()));
    }
  }
  return absl::OkStatus();
}

// The constants that device steps read (a host fallback reads the graph's own).
std::vector<const Value*> DeviceConstants(const Graph& graph, const std::vector<NodePlan>& plans) {
  std::vector<const Value*> out;
  for (size_t i = 0; i < plans.size(); ++i) {
    if (plans[i].kind == NodeKind::kFallback) continue;
    for (const Value* v : graph.nodes()[i]->inputs) {
      if (v && v->is_constant()) out.push_back(v);
    }
  }
  return out;
}

absl::Status CudaEngine::Build(const CompiledGraph& compiled, const CudaEngineOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  options_ = options;
  const char* debug = std::getenv("KILN_CUDA_DEBUG");
  if (debug && std::string(debug) == "1") options_.debug_sync = true;
  if (options_.debug_sync) options_.cuda_graph = false;
  graph_ = compiled.graph->Clone();
  for (const Value* v : graph_->inputs) {
    if (!v->shape || !IsStatic(*v->shape)) return absl::InvalidArgumentError("input '" + v->name + "' is not static");
    input_specs_.push_back(SpecOf(v));
  }
  for (const Value* v : graph_->outputs) {
    if (!v->shape || !IsStatic(*v->shape)) return absl::InvalidArgumentError("output '" + v->name + "' is not static");
    output_specs_.push_back(SpecOf(v));
  }
  RETURN_IF_ERROR(SelectDevice());
  RETURN_IF_ERROR(LoadCudaLibraries());
  RETURN_IF_ERROR(PlanNodes());
  ASSIGN_OR_RETURN(const ArenaLayout layout, LayOutArena(*graph_, compiled.plan, DeviceConstants(*graph_, plans_)));
  ASSIGN_OR_RETURN(mem_, AllocateArena(layout));
  RETURN_IF_ERROR(CreateLibraries());
  RETURN_IF_ERROR(MakeSteps());
  RETURN_IF_ERROR(LoadKernels());
  // Uploads and the zero bias went through the legacy default stream, which the engine's
  // non-blocking stream does not wait for.
  KILN_CUDA(cudaDeviceSynchronize());
  info_.device = "cuda:" + std::to_string(options_.device);
  info_.batch = input_specs_.empty() || input_specs_[0].shape.empty() ? 1 : input_specs_[0].shape[0];
  info_.arena_bytes = compiled.plan.arena_bytes + static_cast<int64_t>(ctx_.workspace_bytes);
  info_.weight_bytes = mem_.weight_bytes;
  RETURN_IF_ERROR(WarmUpAndCapture());
  info_.build_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return absl::OkStatus();
}

// One eager run on zero inputs (every step's first launch happens outside capture), then the
// capture. A capture that fails leaves the engine running its steps eagerly, and says so.
absl::Status CudaEngine::WarmUpAndCapture() {
  for (size_t i = 0; i < mem_.in_host.size(); ++i) std::memset(mem_.in_host[i], 0, mem_.in_bytes[i]);
  if (options_.warm_up) {
    RETURN_IF_ERROR(Enqueue());
    KILN_CUDA(cudaStreamSynchronize(stream_));
    // A reference kernel may refuse all-zero inputs (an integer division): not the engine's fault.
    host_errors_.TakeFirst().IgnoreError();
  }
  if (!options_.cuda_graph) {
    info_.isa += options_.debug_sync ? ", eager launches, synchronised per step (debug)" : ", eager launches";
    return absl::OkStatus();
  }
  const absl::Status st = captured_.Capture(stream_, [this] { return Enqueue(); });
  info_.isa += st.ok() ? ", CUDA graph of " + std::to_string(captured_.nodes()) + " nodes"
                       : ", eager launches (graph capture failed: " + std::string(st.message()) + ")";
  return absl::OkStatus();
}

absl::Status CudaEngine::Run(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) {
  RETURN_IF_ERROR(runtime::CheckInputs(input_specs_, inputs));
  // The current device is per thread: Run may come from another thread than Build.
  KILN_CUDA(cudaSetDevice(options_.device));
  for (size_t i = 0; i < inputs.size(); ++i) std::memcpy(mem_.in_host[i], inputs[i].raw(), mem_.in_bytes[i]);
  if (captured_.ready()) {
    RETURN_IF_ERROR(captured_.Launch(stream_));
  } else {
    RETURN_IF_ERROR(Enqueue());
  }
  KILN_CUDA(cudaStreamSynchronize(stream_));
  RETURN_IF_ERROR(host_errors_.TakeFirst());
  outputs.resize(output_specs_.size());
  for (size_t k = 0; k < outputs.size(); ++k) {
    const auto& spec = output_specs_[k];
    if (outputs[k].dtype() != spec.dtype || outputs[k].shape() != spec.shape) {
      outputs[k] = Tensor(spec.dtype, spec.shape);  // first call only
    }
    std::memcpy(outputs[k].raw_mutable(), mem_.out_host[k], mem_.out_bytes[k]);
  }
  return absl::OkStatus();
}

CudaEngine::~CudaEngine() {
  // Teardown errors have nowhere to go; the device must be idle before memory is freed, and
  // the captured graph go before the kernels it launches.
  cudaSetDevice(options_.device);
  if (stream_) cudaStreamSynchronize(stream_);
  captured_.Reset();
  if (library_) cudaLibraryUnload(library_);
  if (ctx_.cudnn) Dnn().cudnnDestroy(ctx_.cudnn);
  if (ctx_.lt) Lt().cublasLtDestroy(ctx_.lt);
  if (stream_) cudaStreamDestroy(stream_);
}

}  // namespace

absl::StatusOr<std::unique_ptr<runtime::Engine>> BuildCudaEngine(const CompiledGraph& compiled,
                                                                  const CudaEngineOptions& options) {
  if (!compiled.graph) return absl::InvalidArgumentError("cuda engine: no graph");
  RETURN_IF_ERROR(ref::CheckSupported(*compiled.graph));  // host fallbacks and bodies need kernels
  const std::string device = "cuda:" + std::to_string(options.device);
  if (HasDynamicShapes(*compiled.graph)) {
    // Shapes known only per run: the static region on this engine (its sub-graph is all
    // static, so one level deep), the rest on the reference per call, as on the CPU. The GPU
    // is checked first, so a graph with no static region does not pass for a GPU engine on a
    // machine without one.
    RETURN_IF_ERROR(CheckDeviceUsable(options.device));
    return runtime::BuildDynamicEngine(
        compiled, [&](const CompiledGraph& part) { return BuildCudaEngine(part, options); }, device,
        "cuda");
  }
  auto engine = std::make_unique<CudaEngine>();
  absl::Status st = engine->Build(compiled, options);
  if (!st.ok()) {
    return absl::Status(st.code(), device + ": " + std::string(st.message()));
  }
  return std::unique_ptr<runtime::Engine>(std::move(engine));
}

}  // namespace kiln::cuda

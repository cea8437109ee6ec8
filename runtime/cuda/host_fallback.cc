// Ops no device path takes run their reference kernel on the host, inside the stream: the
// node's device inputs are copied to pinned buffers, a host callback (cudaLaunchHostFunc,
// which a CUDA graph captures like any node) runs the kernel over views of them and writes
// the outputs to pinned buffers, which are copied back. Correct and slow; EngineInfo counts
// these as fallback ops. The callback may not call CUDA, so its errors are recorded for Run.
#include <cstring>

#include "ops/interpreter.h"
#include "runtime/cuda/cuda_status.h"
#include "runtime/cuda/device_memory.h"
#include "runtime/cuda/steps.h"

namespace kiln::cuda {
namespace {

struct HostOperand {
  void* device = nullptr;  // nullptr: a constant, read from the graph on the host
  PinnedBuffer host;
  Tensor view;             // over `host` (or the constant)
};

class FallbackStep : public Step {
 public:
  FallbackStep(const Node& node, HostErrors* errors) : node_(node), errors_(errors) {}

  absl::Status Enqueue(cudaStream_t stream) override {
    for (HostOperand& in : inputs_) {
      if (in.device && in.view.nbytes() > 0) {
        KILN_CUDA(cudaMemcpyAsync(in.host.get(), in.device, in.view.nbytes(), cudaMemcpyDeviceToHost, stream));
      }
    }
    KILN_CUDA(cudaLaunchHostFunc(stream, &FallbackStep::Callback, this));
    for (HostOperand& out : outputs_) {
      if (out.device && out.view.nbytes() > 0) {
        KILN_CUDA(cudaMemcpyAsync(out.device, out.host.get(), out.view.nbytes(), cudaMemcpyHostToDevice, stream));
      }
    }
    return absl::OkStatus();
  }

  absl::Status Bind(BuildContext& ctx);

 private:
  static void Callback(void* self) { static_cast<FallbackStep*>(self)->RunOnHost(); }

  void RunOnHost() {
    ref::KernelInputs ins;
    for (const HostOperand& in : inputs_) ins.push_back(in.view.defined() ? &in.view : nullptr);
    absl::StatusOr<std::vector<Tensor>> outs = ref::RunNode(node_, ins);
    if (!outs.ok()) {
      errors_->Record(outs.status());
      return;
    }
    for (size_t k = 0; k < outputs_.size() && k < outs->size(); ++k) {
      const Tensor& got = (*outs)[k];
      Tensor& want = outputs_[k].view;
      if (!want.defined()) continue;
      if (got.dtype() != want.dtype() || got.shape() != want.shape()) {
        errors_->Record(absl::InternalError(node_.Describe() + ": the reference kernel's output " +
                                            std::to_string(k) + " is not the planned shape"));
        return;
      }
      std::memcpy(want.raw_mutable(), got.raw(), got.nbytes());
    }
  }

  const Node& node_;
  HostErrors* errors_;
  std::vector<HostOperand> inputs_, outputs_;
};

absl::StatusOr<HostOperand> Stage(BuildContext& ctx, const Value* v) {
  HostOperand op;
  if (!v) return op;
  if (!v->shape || !IsStatic(*v->shape) || DTypeSize(v->dtype) == 0) {
    return absl::UnimplementedError("value '" + v->name + "' has no static dense shape");
  }
  ASSIGN_OR_RETURN(op.device, ctx.Ptr(v));
  const std::vector<int64_t> dims = StaticDims(*v->shape);
  const size_t bytes = static_cast<size_t>(NumElements(dims)) * DTypeSize(v->dtype);
  ASSIGN_OR_RETURN(op.host, PinnedBuffer::Allocate(bytes));
  // The view does not own the pinned memory: the step does, and outlives every run.
  op.view = Tensor::View(v->dtype, dims, std::shared_ptr<void>(op.host.get(), [](void*) {}), op.host.get());
  return op;
}

absl::Status FallbackStep::Bind(BuildContext& ctx) {
  for (const Value* v : node_.inputs) {
    if (v && v->is_constant()) {
      HostOperand c;
      c.view = *v->constant;
      inputs_.push_back(std::move(c));
      continue;
    }
    ASSIGN_OR_RETURN(HostOperand op, Stage(ctx, v));
    inputs_.push_back(std::move(op));
  }
  for (const Value* v : node_.outputs) {
    ASSIGN_OR_RETURN(HostOperand op, Stage(ctx, v));
    outputs_.push_back(std::move(op));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Step>> MakeFallbackStep(BuildContext& ctx, const Node& node) {
  auto s = std::make_unique<FallbackStep>(node, ctx.host_errors);
  RETURN_IF_ERROR(s->Bind(ctx));
  return std::unique_ptr<Step>(std::move(s));
}

}  // namespace kiln::cuda

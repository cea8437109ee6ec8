// Launches of generated kernels (compiler/codegen): every parameter is a device pointer
// bound at build; the kernel handle comes from the engine's module once it is loaded.
#include <limits>

#include "runtime/cuda/cuda_status.h"
#include "runtime/cuda/steps.h"

namespace kiln::cuda {
namespace {

class LaunchStep : public Step {
 public:
  LaunchStep(const std::vector<cudaKernel_t>* handles, size_t index, std::vector<void*> args,
             unsigned grid, unsigned block)
      : handles_(handles), index_(index), args_(std::move(args)), grid_(grid), block_(block) {
    for (void*& a : args_) argv_.push_back(&a);
  }

  absl::Status Enqueue(cudaStream_t stream) override {
    const cudaKernel_t k = (*handles_)[index_];
    if (!k) return absl::InternalError("generated kernel not loaded");
    // The runtime takes a library kernel handle where it takes a function symbol.
    KILN_CUDA(cudaLaunchKernel(reinterpret_cast<const void*>(k), dim3(grid_), dim3(block_), argv_.data(),
                               0, stream));
    return absl::OkStatus();
  }

 private:
  const std::vector<cudaKernel_t>* handles_;
  size_t index_;
  std::vector<void*> args_;
  std::vector<void*> argv_;  // &args_[i], as cudaLaunchKernel wants them
  unsigned grid_, block_;
};

}  // namespace

absl::StatusOr<StepList> MakeKernelSteps(BuildContext& ctx, const Node& node,
                                         const std::vector<codegen::Kernel>& kernels) {
  StepList steps;
  for (const codegen::Kernel& k : kernels) {
    std::vector<void*> args;
    for (const codegen::KernelParam& p : k.params) {
      const Value* v = p.kind == codegen::KernelParam::Kind::kInput ? node.input(p.index) : node.output(p.index);
      ASSIGN_OR_RETURN(void* ptr, ctx.Ptr(v));
      args.push_back(ptr);
    }
    if (k.grid <= 0 || k.grid > std::numeric_limits<int>::max() || k.block <= 0 ||
        k.block > ctx.prop.maxThreadsPerBlock) {
      return absl::InternalError(k.name + ": launch shape out of range");
    }
    const size_t index = ctx.kernels.size();
    ctx.kernels.push_back(k);
    steps.push_back(std::make_unique<LaunchStep>(&ctx.handles, index, std::move(args),
                                                 static_cast<unsigned>(k.grid), static_cast<unsigned>(k.block)));
  }
  return steps;
}

}  // namespace kiln::cuda

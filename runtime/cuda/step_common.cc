// The small parts of the step machinery: value pointers, host errors, plain copies.
#include "runtime/cuda/cuda_status.h"
#include "runtime/cuda/steps.h"

namespace kiln::cuda {

void HostErrors::Record(absl::Status st) {
  std::lock_guard<std::mutex> lock(mu_);
  if (first_.ok()) first_ = std::move(st);
}

absl::Status HostErrors::TakeFirst() {
  std::lock_guard<std::mutex> lock(mu_);
  absl::Status st = std::move(first_);
  first_ = absl::OkStatus();
  return st;
}

absl::StatusOr<void*> BuildContext::Ptr(const Value* v) const {
  if (!v) return absl::InvalidArgumentError("omitted operand");
  auto it = ptrs.find(v->name);
  if (it == ptrs.end()) return absl::InternalError("no device buffer for value '" + v->name + "'");
  return it->second;
}

namespace {

class CopyStep : public Step {
 public:
  CopyStep(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind)
      : dst_(dst), src_(src), bytes_(bytes), kind_(kind) {}
  absl::Status Enqueue(cudaStream_t stream) override {
    if (bytes_ == 0 || dst_ == src_) return absl::OkStatus();
    KILN_CUDA(cudaMemcpyAsync(dst_, src_, bytes_, kind_, stream));
    return absl::OkStatus();
  }

 private:
  void* dst_;
  const void* src_;
  size_t bytes_;
  cudaMemcpyKind kind_;
};

}  // namespace

std::unique_ptr<Step> MakeCopyStep(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  return std::make_unique<CopyStep>(dst, src, bytes, kind);
}

}  // namespace kiln::cuda

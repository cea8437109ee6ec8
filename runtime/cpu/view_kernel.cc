// Reshape & co.: the memory plan makes the output share the input's bytes, so the kernel is
// a no-op; it copies only where the two are bound to different memory (a graph output, or a
// view of a caller's tensor that the plan could not alias).
#include <cstring>

#include "runtime/cpu/build_context.h"
#include "runtime/cpu/own_kernels.h"

namespace kiln::cpu {
namespace {

class ViewKernel : public CpuKernel {
 public:
  bool follows_team() const override { return true; }
  ViewKernel(int in, int out, size_t bytes) : in_(in), out_(out), bytes_(bytes) {}
  absl::Status Run(const ExecContext& ctx) override {
    if (ctx.ptrs[in_] != ctx.ptrs[out_] && bytes_ > 0) {
      std::memmove(ctx.ptrs[out_], ctx.ptrs[in_], bytes_);
    }
    return absl::OkStatus();
  }

 private:
  int in_, out_;
  size_t bytes_;
};

}  // namespace

std::unique_ptr<CpuKernel> MakeViewKernel(BuildContext& ctx, const Node& node) {
  if (!node.domain.empty()) return nullptr;
  const std::string& op = node.op_type;
  if (op != "Reshape" && op != "Flatten" && op != "Squeeze" && op != "Unsqueeze" &&
      op != "Identity") {
    return nullptr;
  }
  int in = ctx.SlotOf(node.input(0)), out = ctx.SlotOf(node.output(0));
  if (in < 0 || out < 0) return nullptr;
  const Slot& x = ctx.slots[in];
  const Slot& y = ctx.slots[out];
  if (x.dtype != y.dtype || NumElements(x.shape) != NumElements(y.shape) ||
      DTypeSize(x.dtype) == 0) {
    return nullptr;
  }
  const size_t bytes = static_cast<size_t>(NumElements(y.shape)) * DTypeSize(y.dtype);
  if (!x.is_plain()) in = ctx.ReadAs(in, ctx.PlainMd(in));
  return std::make_unique<ViewKernel>(in, out, bytes);
}

}  // namespace kiln::cpu

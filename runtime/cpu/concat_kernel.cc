// Concat along one axis, any dtype: for each outer block, each input contributes one
// contiguous run of (its axis extent x inner) elements.
#include <cstring>

#include "runtime/cpu/own_kernels.h"

namespace kiln::cpu {
namespace {

class ConcatKernel : public CpuKernel {
 public:
  ConcatKernel(std::vector<int> in, std::vector<size_t> run, int out, int64_t outer)
      : in_(std::move(in)), run_(std::move(run)), out_(out), outer_(outer) {}

  absl::Status Run(const ExecContext& ctx) override {
    char* y = static_cast<char*>(ctx.ptrs[out_]);
    for (int64_t o = 0; o < outer_; ++o) {
      for (size_t k = 0; k < in_.size(); ++k) {
        if (run_[k] == 0) continue;
        std::memcpy(y, static_cast<const char*>(ctx.ptrs[in_[k]]) + o * run_[k], run_[k]);
        y += run_[k];
      }
    }
    return absl::OkStatus();
  }

 private:
  std::vector<int> in_;
  std::vector<size_t> run_;  // bytes per outer block, per input
  int out_;
  int64_t outer_;
};

}  // namespace

std::unique_ptr<CpuKernel> MakeConcatKernel(BuildContext& ctx, const Node& node) {
  if (!node.domain.empty() || node.op_type != "Concat" || node.inputs.empty()) return nullptr;
  const int out = ctx.SlotOf(node.output(0));
  if (out < 0) return nullptr;
  const std::vector<int64_t>& ys = ctx.slots[out].shape;
  const size_t elem = DTypeSize(ctx.slots[out].dtype);
  const int64_t rank = static_cast<int64_t>(ys.size());
  int64_t axis = node.GetInt("axis", 0);
  if (axis < 0) axis += rank;
  if (elem == 0 || axis < 0 || axis >= rank) return nullptr;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < rank; ++d) {
    if (d < axis) outer *= ys[d];
    if (d > axis) inner *= ys[d];
  }
  std::vector<int> in;
  std::vector<size_t> run;
  int64_t extent = 0;
  for (const Value* v : node.inputs) {
    const int s = ctx.SlotOf(v);
    if (s < 0 || !ctx.slots[s].is_plain() || ctx.slots[s].dtype != ctx.slots[out].dtype ||
        static_cast<int64_t>(ctx.slots[s].shape.size()) != rank) {
      return nullptr;
    }
    const int64_t a = ctx.slots[s].shape[axis];
    extent += a;
    in.push_back(s);
    run.push_back(static_cast<size_t>(a * inner) * elem);
  }
  if (extent != ys[axis]) return nullptr;
  return std::make_unique<ConcatKernel>(std::move(in), std::move(run), out, outer);
}

}  // namespace kiln::cpu

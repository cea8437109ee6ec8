// Gather along one axis, any dtype: for each outer block and each index, one contiguous copy
// of the inner block. Indices are int32 or int64, negative ones count from the end; an index
// out of range is INVALID_ARGUMENT (never a read outside the tensor).
#include <cstring>

#include "runtime/cpu/own_kernels.h"

namespace kiln::cpu {
namespace {

class GatherKernel : public CpuKernel {
 public:
  bool follows_team() const override { return true; }
  GatherKernel(int data, int idx, int out, bool idx64, int64_t outer, int64_t n,
               int64_t count, size_t block)
      : data_(data), idx_(idx), out_(out), idx64_(idx64), outer_(outer), n_(n), count_(count),
        block_(block) {}

  absl::Status Run(const ExecContext& ctx) override {
    const char* x = static_cast<const char*>(ctx.ptrs[data_]);
    char* y = static_cast<char*>(ctx.ptrs[out_]);
    auto index = [&](int64_t j) {
      const int64_t k = idx64_ ? static_cast<const int64_t*>(ctx.ptrs[idx_])[j]
                               : static_cast<const int32_t*>(ctx.ptrs[idx_])[j];
      return k < 0 ? k + n_ : k;
    };
    for (int64_t j = 0; j < count_; ++j) {
      const int64_t k = index(j);
      if (k < 0 || k >= n_) {
        return absl::InvalidArgumentError("Gather: index out of range for an axis of " +
                                          std::to_string(n_));
      }
    }
    // Split over the team by index when the copy is large (a channel shuffle's megabytes).
    const bool parallel = outer_ * count_ * static_cast<int64_t>(block_) >= kParallelElements * 4;
    ForEachIndex(count_, parallel, [&](int64_t j) {
      const int64_t k = index(j);
      for (int64_t o = 0; o < outer_; ++o) {
        std::memcpy(y + (o * count_ + j) * block_, x + (o * n_ + k) * block_, block_);
      }
    });
    return absl::OkStatus();
  }

 private:
  int data_, idx_, out_;
  bool idx64_;
  int64_t outer_, n_, count_;
  size_t block_;
};

}  // namespace

std::unique_ptr<CpuKernel> MakeGatherKernel(BuildContext& ctx, const Node& node) {
  if (!node.domain.empty() || node.op_type != "Gather") return nullptr;
  const int data = ctx.SlotOf(node.input(0)), idx = ctx.SlotOf(node.input(1));
  const int out = ctx.SlotOf(node.output(0));
  if (data < 0 || idx < 0 || out < 0 || !ctx.slots[data].is_plain()) return nullptr;
  const DType it = ctx.slots[idx].dtype;
  const size_t elem = DTypeSize(ctx.slots[data].dtype);
  if ((it != DType::kInt64 && it != DType::kInt32) || elem == 0) return nullptr;
  const std::vector<int64_t>& xs = ctx.slots[data].shape;
  const int64_t rank = static_cast<int64_t>(xs.size());
  int64_t axis = node.GetInt("axis", 0);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) return nullptr;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < rank; ++d) {
    if (d < axis) outer *= xs[d];
    if (d > axis) inner *= xs[d];
  }
  const int64_t count = NumElements(ctx.slots[idx].shape);
  if (outer * count * inner != NumElements(ctx.slots[out].shape)) return nullptr;
  return std::make_unique<GatherKernel>(data, idx, out, it == DType::kInt64, outer, xs[axis],
                                        count, inner * elem);
}

}  // namespace kiln::cpu

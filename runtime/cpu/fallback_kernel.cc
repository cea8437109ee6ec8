// The fallback: any op without a fast kernel runs its reference kernel on views of its
// planned inputs, and the result is copied into its planned buffer. Correct for every op the
// reference supports; allocates per run (the reference kernels return fresh tensors).
#include <cstring>
#include <optional>

#include "ops/interpreter.h"
#include "runtime/cpu/build_context.h"

namespace kiln::cpu {
namespace {

class FallbackKernel : public CpuKernel {
 public:
  bool follows_team() const override { return true; }
  FallbackKernel(const Node& node, std::vector<std::optional<Slot>> in, std::vector<int> in_slots,
                 std::vector<std::optional<Slot>> out, std::vector<int> out_slots)
      : node_(node), in_(std::move(in)), in_slots_(std::move(in_slots)), out_(std::move(out)),
        out_slots_(std::move(out_slots)) {}

  bool is_fallback() const override { return true; }

  absl::Status Run(const ExecContext& ctx) override {
    std::vector<Tensor> views(in_.size());
    ref::KernelInputs inputs(in_.size(), nullptr);
    for (size_t i = 0; i < in_.size(); ++i) {
      if (!in_[i]) continue;
      views[i] = Tensor::View(in_[i]->dtype, in_[i]->shape, nullptr, ctx.ptrs[in_slots_[i]]);
      inputs[i] = &views[i];
    }
    ASSIGN_OR_RETURN(std::vector<Tensor> results, ref::RunNode(node_, inputs));
    for (size_t i = 0; i < out_.size() && i < results.size(); ++i) {
      if (!out_[i]) continue;
      if (results[i].dtype() != out_[i]->dtype || results[i].shape() != out_[i]->shape) {
        return absl::InternalError(node_.Describe() + ": reference kernel produced " +
                                   DTypeName(results[i].dtype()) + " " +
                                   ShapeToString(results[i].shape()) + ", the plan expects " +
                                   DTypeName(out_[i]->dtype) + " " +
                                   ShapeToString(out_[i]->shape));
      }
      if (results[i].nbytes() > 0) {
        std::memcpy(ctx.ptrs[out_slots_[i]], results[i].raw(), results[i].nbytes());
      }
    }
    return absl::OkStatus();
  }

 private:
  const Node& node_;
  // Copies: the slot table may grow (and move) while later kernels are built.
  std::vector<std::optional<Slot>> in_;
  std::vector<int> in_slots_;
  std::vector<std::optional<Slot>> out_;
  std::vector<int> out_slots_;
};

}  // namespace

std::unique_ptr<CpuKernel> MakeFallback(BuildContext& ctx, const Node& node) {
  std::vector<int> in_slots, out_slots;
  for (const Value* v : node.inputs) {
    const int s = ctx.SlotOf(v);
    // The reference reads plain row-major data.
    in_slots.push_back(s < 0 || ctx.slots[s].is_plain() ? s : ctx.ReadAs(s, ctx.PlainMd(s)));
  }
  for (const Value* v : node.outputs) out_slots.push_back(ctx.SlotOf(v));
  std::vector<std::optional<Slot>> in, out;
  for (int s : in_slots) in.push_back(s < 0 ? std::nullopt : std::optional<Slot>(ctx.slots[s]));
  for (int s : out_slots) out.push_back(s < 0 ? std::nullopt : std::optional<Slot>(ctx.slots[s]));
  return std::make_unique<FallbackKernel>(node, std::move(in), std::move(in_slots),
                                          std::move(out), std::move(out_slots));
}

}  // namespace kiln::cpu

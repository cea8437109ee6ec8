// Where(condition, X, Y) with numpy broadcasting over all three, for elements of 1, 2, 4 or
// 8 bytes (any dtype): the output is walked row by row along its innermost dim, an odometer
// over the outer dims keeping each input's offset. Text models apply their attention masks
// with it on every run.
#include <array>
#include <cstring>

#include "runtime/cpu/own_kernels.h"

namespace kiln::cpu {
namespace {

class WhereKernel : public WordKernel<WhereKernel> {
 public:
  bool follows_team() const override { return true; }
  WhereKernel(std::array<int, 3> in, int out, std::vector<int64_t> shape,
              std::array<std::vector<int64_t>, 3> strides, size_t elem)
      : WordKernel(elem),
        in_(in),
        out_(out),
        shape_(std::move(shape)),
        strides_(std::move(strides)),
        index_(shape_.size(), 0) {}

  template <class T>
  void Walk(const ExecContext& ctx) {
    const uint8_t* c = static_cast<const uint8_t*>(ctx.ptrs[in_[0]]);  // bool as bytes
    const T* a = static_cast<const T*>(ctx.ptrs[in_[1]]);
    const T* b = static_cast<const T*>(ctx.ptrs[in_[2]]);
    T* y = static_cast<T*>(ctx.ptrs[out_]);
    const size_t last = shape_.size() - 1;
    const int64_t n = shape_[last], sc = strides_[0][last], sa = strides_[1][last],
                  sb = strides_[2][last];
    const int64_t total = NumElements(shape_);
    std::fill(index_.begin(), index_.end(), 0);
    int64_t oc = 0, oa = 0, ob = 0;
    for (int64_t i = 0; i < total; i += n) {
      for (int64_t j = 0; j < n; ++j) y[i + j] = c[oc + j * sc] ? a[oa + j * sa] : b[ob + j * sb];
      for (int64_t d = static_cast<int64_t>(last) - 1; d >= 0; --d) {  // next row
        oc += strides_[0][d];
        oa += strides_[1][d];
        ob += strides_[2][d];
        if (++index_[d] < shape_[d]) break;
        oc -= strides_[0][d] * shape_[d];
        oa -= strides_[1][d] * shape_[d];
        ob -= strides_[2][d] * shape_[d];
        index_[d] = 0;
      }
    }
  }

 private:
  std::array<int, 3> in_;
  int out_;
  std::vector<int64_t> shape_;
  std::array<std::vector<int64_t>, 3> strides_;
  std::vector<int64_t> index_;
};

}  // namespace

std::unique_ptr<CpuKernel> MakeWhereKernel(BuildContext& ctx, const Node& node) {
  if (!node.domain.empty() || node.op_type != "Where" || node.inputs.size() != 3) return nullptr;
  const int out = ctx.SlotOf(node.output(0));
  if (out < 0) return nullptr;
  std::vector<int64_t> shape = ctx.slots[out].shape;
  if (shape.empty()) shape = {1};
  const size_t elem = DTypeSize(ctx.slots[out].dtype);
  if (!IsWordSize(elem) || NumElements(shape) == 0) return nullptr;
  std::array<int, 3> in{};
  std::array<std::vector<int64_t>, 3> strides;
  for (size_t k = 0; k < 3; ++k) {
    in[k] = ctx.SlotOf(node.input(k));
    if (in[k] < 0) return nullptr;
    const Slot& s = ctx.slots[in[k]];
    if (k == 0 ? s.dtype != DType::kBool : s.dtype != ctx.slots[out].dtype) return nullptr;
    auto st = BroadcastStrides(s.shape, shape);
    if (!st) return nullptr;
    strides[k] = std::move(*st);
    if (!s.is_plain()) in[k] = ctx.ReadAs(in[k], ctx.PlainMd(in[k]));
  }
  return std::make_unique<WhereKernel>(in, out, shape, std::move(strides), elem);
}

}  // namespace kiln::cpu

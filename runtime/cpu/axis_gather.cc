#include "runtime/cpu/axis_gather.h"

#include <algorithm>
#include <cstring>

#include "runtime/cpu/own_kernels.h"

namespace kiln::cpu {
namespace {

// The longest run [lo, hi) of the innermost map with map[j] = j - shift.
void IdentitySpan(const std::vector<int64_t>& map, int64_t& lo, int64_t& hi, int64_t& shift) {
  lo = hi = shift = 0;
  const int64_t n = static_cast<int64_t>(map.size());
  for (int64_t j = 0; j < n;) {
    if (map[j] < 0) {
      ++j;
      continue;
    }
    int64_t k = j + 1;
    while (k < n && map[k] == map[j] + (k - j)) ++k;
    if (k - j > hi - lo) {
      lo = j;
      hi = k;
      shift = j - map[j];
    }
    j = k;
  }
}

class AxisGatherKernel : public WordKernel<AxisGatherKernel> {
 public:
  bool follows_team() const override { return true; }
  AxisGatherKernel(int in, int out, AxisGatherPlan plan, std::vector<unsigned char> fill)
      : WordKernel(plan.elem),
        in_(in),
        out_(out),
        p_(std::move(plan)),
        fill_(std::move(fill)),
        index_(p_.out_shape.size(), 0) {
    IdentitySpan(p_.map.back(), lo_, hi_, shift_);
  }

  template <class T>
  void Walk(const ExecContext& ctx) {
    const T* x = static_cast<const T*>(ctx.ptrs[in_]);
    T* y = static_cast<T*>(ctx.ptrs[out_]);
    T fill;
    std::memcpy(&fill, fill_.data(), sizeof(T));
    const int64_t last = static_cast<int64_t>(p_.out_shape.size()) - 1;
    const int64_t n = p_.out_shape[last];
    const int64_t rows = n == 0 ? 0 : NumElements(p_.out_shape) / n;
    const std::vector<int64_t>& inner = p_.map[last];
    std::fill(index_.begin(), index_.end(), 0);
    for (int64_t r = 0; r < rows; ++r, y += n) {
      int64_t base = 0;
      for (int64_t d = 0; d < last && base >= 0; ++d) {
        const int64_t i = p_.map[d][index_[d]];
        base = i < 0 ? -1 : base + i * p_.in_strides[d];
      }
      if (base < 0) {
        std::fill(y, y + n, fill);
      } else {
        for (int64_t j = 0; j < lo_; ++j) y[j] = inner[j] < 0 ? fill : x[base + inner[j]];
        if (hi_ > lo_) std::memcpy(y + lo_, x + base + lo_ - shift_, (hi_ - lo_) * sizeof(T));
        for (int64_t j = hi_; j < n; ++j) y[j] = inner[j] < 0 ? fill : x[base + inner[j]];
      }
      for (int64_t d = last - 1; d >= 0; --d) {
        if (++index_[d] < p_.out_shape[d]) break;
        index_[d] = 0;
      }
    }
  }

 private:
  int in_, out_;
  AxisGatherPlan p_;
  std::vector<unsigned char> fill_;
  std::vector<int64_t> index_;
  int64_t lo_ = 0, hi_ = 0, shift_ = 0;  // the innermost identity span
};

}  // namespace

std::unique_ptr<CpuKernel> MakeAxisGather(int in, int out, AxisGatherPlan plan,
                                          std::vector<unsigned char> fill) {
  if (plan.out_shape.empty() || plan.map.size() != plan.out_shape.size()) return nullptr;
  return std::make_unique<AxisGatherKernel>(in, out, std::move(plan), std::move(fill));
}

std::vector<int64_t> ContiguousStrides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d) {
    strides[d] = strides[d + 1] * shape[d + 1];
  }
  return strides;
}

}  // namespace kiln::cpu

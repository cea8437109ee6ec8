// Internal to runtime/cpu: the guard that keeps oneDNN's fast kernels exact on NaN and
// infinities.
//
// oneDNN computes ReLU, Clip and max pooling with max/min instructions, which return the
// other operand when one is NaN (and max pooling starts from -FLT_MAX, not -inf): a fused
// Conv+ReLU maps NaN to 0 where ONNX's Relu keeps NaN. Moving those activations out of the
// convolution would cost a pass over every activation; instead, a guarded kernel runs its
// fused primitive only when it can prove the answer is the same, and its exact path
// otherwise:
//   - a convolution's pre-activation cannot be NaN when its input and residual are finite
//     and bounded so that no partial sum overflows (|x| <= B gives |sum| <= L1(w) * B + |b|);
//   - a max pool is exact when its input is finite.
// What each value is known to be is tracked per run (FiniteBounds): a guarded kernel
// records the bound of what it wrote, so a chain of convolutions proves itself from the
// graph input's one scan; a value no guarded kernel wrote is scanned once when needed.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace kiln::cpu {

// Largest |x[i]| over n floats; +inf when any element is NaN or infinite.
float FiniteMaxAbs(const float* x, int64_t n);

// The largest pre-activation bound a fused kernel accepts: no partial sum can reach inf.
inline constexpr float kSafeBound = 1e37f;

class FiniteBounds {
 public:
  void Resize(size_t slots) {
    bound_.assign(slots, 0.f);
    stamp_.assign(slots, 0);
  }
  void NewRun() { ++run_; }
  // The current run's number (a kernel keeping per-run state stamps it).
  uint64_t run() const { return run_; }
  // The bound recorded for `slot` in this run, if any.
  float Known(int slot) const {
    if (slot >= 0 && static_cast<size_t>(slot) < stamp_.size() && stamp_[slot] == run_) {
      return bound_[slot];
    }
    return std::numeric_limits<float>::infinity();
  }
  // The bound recorded for `slot` in this run, or a scan of its `floats` elements at `p`.
  float Of(int slot, const void* p, int64_t floats) {
    if (slot >= 0 && static_cast<size_t>(slot) < stamp_.size() && stamp_[slot] == run_) {
      return bound_[slot];
    }
    const float b = FiniteMaxAbs(static_cast<const float*>(p), floats);
    Set(slot, b);
    return b;
  }
  // `out` holds exactly the values of `in` (a concatenation): its bound is the largest of
  // theirs when every one is known this run; else nothing is recorded.
  void SetMaxOf(const std::vector<int>& in, int out) {
    float b = 0.f;
    for (int s : in) b = std::max(b, Known(s));
    if (b <= kSafeBound) Set(out, b);
  }
  void Set(int slot, float b) {
    if (slot < 0 || static_cast<size_t>(slot) >= stamp_.size()) return;
    bound_[slot] = b;
    stamp_[slot] = run_;
  }

 private:
  std::vector<float> bound_;
  std::vector<uint64_t> stamp_;
  uint64_t run_ = 1;
};

}  // namespace kiln::cpu

// ReduceSum/Mean/Max/Min/Prod/SumSquare/L1/L2/LogSum over any set of axes (float32; constant
// or absent axes). The input's dims are merged into alternating runs of kept and reduced dims
// (size-1 dims dropped), so every case is one of two loops over contiguous memory: an
// innermost reduced run folds into one accumulator (a row reduction), an innermost kept run
// folds element-wise into a row of outputs. The output starts at the reduction's identity and
// is finished in place (mean's division, L2's root, LogSum's log). Work splits over the
// outermost run when it is kept (its outputs are disjoint). Accumulation is in float, and Max
// and Min propagate NaN like the reference. ReduceLogSumExp (which wants a max pass for
// stability) and empty reductions stay on the reference.
#include <cmath>
#include <limits>

#include "runtime/cpu/isa.h"
#include "runtime/cpu/own_kernels.h"

namespace kiln::cpu {
namespace {

enum class Kind { kSum, kMean, kMax, kMin, kProd, kSumSquare, kL1, kL2, kLogSum };

std::optional<Kind> KindOf(const std::string& op) {
  static const std::pair<const char*, Kind> kKinds[] = {
      {"ReduceSum", Kind::kSum},   {"ReduceMean", Kind::kMean}, {"ReduceMax", Kind::kMax},
      {"ReduceMin", Kind::kMin},   {"ReduceProd", Kind::kProd},
      {"ReduceSumSquare", Kind::kSumSquare}, {"ReduceL1", Kind::kL1}, {"ReduceL2", Kind::kL2},
      {"ReduceLogSum", Kind::kLogSum}};
  for (const auto& [name, kind] : kKinds) {
    if (op == name) return kind;
  }
  return std::nullopt;
}

float Identity(Kind k) {
  if (k == Kind::kMax) return -std::numeric_limits<float>::infinity();
  if (k == Kind::kMin) return std::numeric_limits<float>::infinity();
  return k == Kind::kProd ? 1.f : 0.f;
}

// Folds n contiguous inputs into one value (starting from the identity).
KILN_ISA_BODY float FoldRowBody(Kind k, const float* x, int64_t n) {
  float s = Identity(k);
  switch (k) {
    case Kind::kMax:
      for (int64_t i = 0; i < n; ++i) s = (x[i] != x[i] || x[i] > s) ? x[i] : s;
      return s;
    case Kind::kMin:
      for (int64_t i = 0; i < n; ++i) s = (x[i] != x[i] || x[i] < s) ? x[i] : s;
      return s;
    case Kind::kProd:
      for (int64_t i = 0; i < n; ++i) s *= x[i];
      return s;
    case Kind::kSumSquare:
    case Kind::kL2:
#pragma omp simd reduction(+ : s)
      for (int64_t i = 0; i < n; ++i) s += x[i] * x[i];
      return s;
    case Kind::kL1:
#pragma omp simd reduction(+ : s)
      for (int64_t i = 0; i < n; ++i) s += std::fabs(x[i]);
      return s;
    default:  // sum, mean, log-sum
#pragma omp simd reduction(+ : s)
      for (int64_t i = 0; i < n; ++i) s += x[i];
      return s;
  }
}
KILN_ISA_VERSIONS(float, FoldRow, (Kind k, const float* x, int64_t n),
                  (k, x, n))


// y[i] = fold(y[i], x[i]) for n contiguous outputs.
KILN_ISA_BODY void FoldIntoBody(Kind k, const float* x, float* y, int64_t n) {
  switch (k) {
    case Kind::kMax:
      for (int64_t i = 0; i < n; ++i) y[i] = (x[i] != x[i] || x[i] > y[i]) ? x[i] : y[i];
      return;
    case Kind::kMin:
      for (int64_t i = 0; i < n; ++i) y[i] = (x[i] != x[i] || x[i] < y[i]) ? x[i] : y[i];
      return;
    case Kind::kProd:
      for (int64_t i = 0; i < n; ++i) y[i] *= x[i];
      return;
    case Kind::kSumSquare:
    case Kind::kL2:
      for (int64_t i = 0; i < n; ++i) y[i] += x[i] * x[i];
      return;
    case Kind::kL1:
      for (int64_t i = 0; i < n; ++i) y[i] += std::fabs(x[i]);
      return;
    default:
      for (int64_t i = 0; i < n; ++i) y[i] += x[i];
      return;
  }
}
KILN_ISA_VERSIONS(void, FoldInto, (Kind k, const float* x, float* y, int64_t n),
                  (k, x, y, n))


// Combines a folded row into an output that may already hold a partial result.
float Combine(Kind k, float acc, float row) {
  switch (k) {
    case Kind::kMax: return (row != row || row > acc) ? row : acc;
    case Kind::kMin: return (row != row || row < acc) ? row : acc;
    case Kind::kProd: return acc * row;
    default: return acc + row;
  }
}

// A run of merged dims: all kept or all reduced.
struct DimRun {
  int64_t size, in_stride, out_stride;  // out_stride 0 for reduced runs
  bool reduced;
};

class ReduceKernel : public CpuKernel {
 public:
  bool follows_team() const override { return true; }
  ReduceKernel(int in, int out, Kind kind, std::vector<DimRun> runs, int64_t outputs, int64_t count)
      : in_(in), out_(out), kind_(kind), runs_(std::move(runs)), outputs_(outputs),
        count_(count) {}

  absl::Status Run(const ExecContext& ctx) override {
    const float* x = static_cast<const float*>(ctx.ptrs[in_]);
    float* y = static_cast<float*>(ctx.ptrs[out_]);
    std::fill(y, y + outputs_, Identity(kind_));
    const DimRun& top = runs_.front();
    if (!top.reduced && runs_.size() > 1 && outputs_ * count_ >= kParallelElements) {
      ForEachIndex(top.size, true, [&](int64_t i) {
        Walk(1, x + i * top.in_stride, y + i * top.out_stride);
      });
    } else {
      Walk(0, x, y);
    }
    Finish(y);
    return absl::OkStatus();
  }

 private:
  // Folds run `level` and everything inside it, at input x and output y (both offset).
  void Walk(size_t level, const float* x, float* y) const {
    const DimRun& r = runs_[level];
    if (level + 1 == runs_.size()) {
      if (r.reduced) {
        *y = Combine(kind_, *y, FoldRow(kind_, x, r.size));
      } else {
        FoldInto(kind_, x, y, r.size);
      }
      return;
    }
    for (int64_t i = 0; i < r.size; ++i) Walk(level + 1, x + i * r.in_stride, y + i * r.out_stride);
  }

  void Finish(float* y) const {
    if (kind_ == Kind::kMean) {
      const float inv = 1.f / static_cast<float>(count_);
      for (int64_t i = 0; i < outputs_; ++i) y[i] *= inv;
    } else if (kind_ == Kind::kL2) {
      for (int64_t i = 0; i < outputs_; ++i) y[i] = std::sqrt(y[i]);
    } else if (kind_ == Kind::kLogSum) {
      for (int64_t i = 0; i < outputs_; ++i) y[i] = std::log(y[i]);
    }
  }

  int in_, out_;
  Kind kind_;
  std::vector<DimRun> runs_;  // merged runs, outermost first
  int64_t outputs_, count_;             // output elements; inputs folded into each
};

// Which dims are reduced; nullopt when the axes are not a constant 1-D int64 tensor.
std::optional<std::vector<bool>> ReducedMask(const Node& node, int64_t rank) {
  const Value* axes = node.input(1);
  if (!axes || (axes->is_constant() && axes->constant->numel() == 0)) {
    return std::vector<bool>(static_cast<size_t>(rank), node.GetInt("noop_with_empty_axes", 0) == 0);
  }
  if (!axes->is_constant() || axes->constant->dtype() != DType::kInt64) return std::nullopt;
  std::vector<bool> mask(static_cast<size_t>(rank), false);
  for (int64_t a : axes->constant->ToInt64Vector()) {
    if (a < 0) a += rank;
    if (a < 0 || a >= rank || mask[a]) return std::nullopt;
    mask[a] = true;
  }
  return mask;
}

// Merged runs, outermost first; strides in elements of the input and of the output.
std::vector<DimRun> MergeRuns(const std::vector<int64_t>& shape, const std::vector<bool>& reduced) {
  std::vector<DimRun> runs;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!runs.empty() && runs.back().reduced == reduced[d]) {
      runs.back().size *= shape[d];
    } else {
      runs.push_back({shape[d], 0, 0, reduced[d]});
    }
  }
  if (runs.empty()) runs.push_back({1, 0, 0, false});  // one element, reduced or not
  int64_t in_stride = 1, out_stride = 1;
  for (auto it = runs.rbegin(); it != runs.rend(); ++it) {
    it->in_stride = in_stride;
    in_stride *= it->size;
    if (!it->reduced) {
      it->out_stride = out_stride;
      out_stride *= it->size;
    }
  }
  return runs;
}

}  // namespace

std::unique_ptr<CpuKernel> MakeReduceKernel(BuildContext& ctx, const Node& node) {
  if (!node.domain.empty()) return nullptr;
  const std::optional<Kind> kind = KindOf(node.op_type);
  if (!kind) return nullptr;
  int in = ctx.SlotOf(node.input(0));
  const int out = ctx.SlotOf(node.output(0));
  if (in < 0 || out < 0 || ctx.slots[in].dtype != DType::kFloat32) return nullptr;
  const std::vector<int64_t> shape = ctx.slots[in].shape;
  if (NumElements(shape) == 0) return nullptr;  // empty reductions: the reference's rules
  const auto mask = ReducedMask(node, static_cast<int64_t>(shape.size()));
  if (!mask) return nullptr;
  int64_t count = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if ((*mask)[d]) count *= shape[d];
  }
  const int64_t outputs = NumElements(shape) / count;
  if (NumElements(ctx.slots[out].shape) != outputs) return nullptr;
  if (!ctx.slots[in].is_plain()) in = ctx.ReadAs(in, ctx.PlainMd(in));
  return std::make_unique<ReduceKernel>(in, out, *kind, MergeRuns(shape, *mask), outputs, count);
}

}  // namespace kiln::cpu

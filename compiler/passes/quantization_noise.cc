#include "compiler/passes/quantization_noise.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace kiln::passes {
namespace {

bool IsOnnx(const Node& n, const char* op) { return n.domain.empty() && n.op_type == op; }

// Elements of a value with a static shape; 0 otherwise.
double Elements(const Value* v) {
  if (!v || !v->shape || !IsStatic(*v->shape)) return 0;
  double n = 1;
  for (int64_t d : StaticDims(*v->shape)) n *= static_cast<double>(d);
  return n;
}

// An average's noise gain: independent roundings of k averaged elements keep 1/k of their
// power (the signal, correlated, keeps its own); a Concat's part fills its share of the
// output. 0: not such an op, or no static shapes.
double AveragingGain(const Node& n, size_t i, const Value* o) {
  const double in = Elements(n.input(i)), out = Elements(o);
  if (!(in > 0 && out > 0)) return 0;
  if (IsOnnx(n, "Concat") || IsOnnx(n, "GlobalAveragePool") || IsOnnx(n, "ReduceMean")) {
    return IsOnnx(n, "Concat") ? in / out : out / in;
  }
  if (IsOnnx(n, "AveragePool")) {
    auto it = n.attrs.find("kernel_shape");
    double k = 1;
    if (it != n.attrs.end()) {
      for (int64_t d : it->second.ints) k *= static_cast<double>(d);
    }
    return 1 / std::max(k, 1.0);
  }
  return 0;
}

// The factor by which n carries noise power from input `i` to output `o` (both float).
double Gain(const Node& n, size_t i, const Value* o, const Calibration& ranges) {
  if (IsOnnx(n, "Add") || IsOnnx(n, "Sub")) return 1;
  if (const double a = AveragingGain(n, i, o); a > 0) return a;
  if (IsOnnx(n, "Mul") && n.inputs.size() == 2) {
    const double other = MeanSquareOf(ranges, n.input(1 - i));
    if (other > 0) return other;
  }
  const double in = MeanSquareOf(ranges, n.input(i)), out = MeanSquareOf(ranges, o);
  // Unknown powers: passed on as they are (an op the calibration saw no finite value of).
  return in > 0 && out > 0 ? out / in : 1;
}

}  // namespace

double MeanSquareOf(const Calibration& ranges, const Value* v) {
  if (!v || v->dtype != DType::kFloat32) return 0;
  if (v->is_constant()) {
    const Tensor& t = *v->constant;
    if (t.numel() == 0) return 0;
    double sum = 0;
    for (int64_t i = 0; i < t.numel(); ++i) sum += double{t.data<float>()[i]} * t.data<float>()[i];
    return std::isfinite(sum) ? sum / t.numel() : 0;
  }
  auto it = ranges.find(v->name);
  return it == ranges.end() ? 0 : it->second.mean_sq;
}

std::unordered_map<const Value*, double> NoiseSensitivity(const Graph& graph,
                                                          const Calibration& ranges) {
  std::unordered_map<const Value*, double> s;
  for (const Value* out : graph.outputs) {
    const double ms = MeanSquareOf(ranges, out);
    if (ms > 0) s[out] += 1 / ms;
  }
  std::vector<const Node*> order;
  for (const auto& n : graph.nodes()) order.push_back(n.get());
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const Node& n = **it;
    for (const Value* o : n.outputs) {
      auto found = s.find(o);
      if (!o || o->dtype != DType::kFloat32 || found == s.end() || !(found->second > 0)) continue;
      const double so = found->second;  // copied: s grows below
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        const Value* in = n.input(i);
        if (!in || in->dtype != DType::kFloat32 || in->is_constant()) continue;
        s[in] += Gain(n, i, o, ranges) * so;
      }
    }
  }
  return s;
}

}  // namespace kiln::passes

#include "runtime/check/differential.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <sstream>

#include "runtime/check/input_hints.h"

namespace kiln::check {

InputRanges WithInputHints(const Graph& graph, InputRanges ranges) {
  for (const auto& [name, hint] : InferInputHints(graph)) {
    if (ranges.per_input.count(name)) continue;
    ranges.per_input[name] = {hint.lo, hint.hi};
    if (hint.binary) ranges.binary.insert(name);
  }
  return ranges;
}

absl::StatusOr<ref::TensorMap> RandomInputs(const Graph& graph, const InputRanges& ranges) {
  std::mt19937_64 rng(ranges.seed);
  ref::TensorMap out;
  for (const Value* in : graph.inputs) {
    if (!in->shape || !IsStatic(*in->shape)) {
      return absl::InvalidArgumentError("input '" + in->name + "' has no static shape");
    }
    Tensor t(in->dtype, StaticDims(*in->shape));
    auto it = ranges.per_input.find(in->name);
    const bool is_float = IsFloatDType(in->dtype);
    double lo = it != ranges.per_input.end() ? it->second.first
                                             : (is_float ? ranges.float_lo : ranges.int_lo);
    double hi = it != ranges.per_input.end() ? it->second.second
                                             : (is_float ? ranges.float_hi : ranges.int_hi);
    const bool binary = in->dtype == DType::kBool || ranges.binary.count(in->name) > 0;
    if (binary) lo = 0, hi = 1;
    if (!IsSupportedDType(in->dtype)) {
      return absl::UnimplementedError("input '" + in->name + "' has unsupported dtype " +
                                      DTypeName(in->dtype));
    }
    std::uniform_real_distribution<double> real(lo, hi);
    std::uniform_int_distribution<int64_t> integer(static_cast<int64_t>(lo),
                                                   static_cast<int64_t>(hi));
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (is_float && binary) {
        t.SetDouble(i, static_cast<double>(rng() & 1));
      } else if (is_float) {
        t.SetDouble(i, real(rng));
      } else {
        t.SetInt(i, integer(rng));
      }
    }
    out[in->name] = std::move(t);
  }
  return out;
}

ref::TensorMap WithNonFiniteValues(const ref::TensorMap& feed, uint64_t seed) {
  constexpr double kSpecial[] = {std::numeric_limits<double>::quiet_NaN(),
                                 std::numeric_limits<double>::infinity(),
                                 -std::numeric_limits<double>::infinity(), -0.0, 1e-40, -1e-42};
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ULL);
  ref::TensorMap out;
  for (const auto& [name, t] : feed) {
    Tensor c = t.Clone();
    if (IsFloatDType(t.dtype())) {
      for (int64_t i = 0; i < c.numel(); ++i) {
        if (rng() % 11 == 0) c.SetDouble(i, kSpecial[rng() % std::size(kSpecial)]);
      }
    }
    out[name] = std::move(c);
  }
  return out;
}

absl::StatusOr<ref::TensorMap> TileRows(const std::vector<const ref::TensorMap*>& sources,
                                        int64_t rows) {
  if (sources.empty() || rows < 1) return absl::InvalidArgumentError("nothing to tile");
  ref::TensorMap out;
  for (const auto& [name, first] : *sources[0]) {
    if (first.rank() < 1) return absl::InvalidArgumentError("'" + name + "' has no rows");
    std::vector<const Tensor*> parts;
    int64_t total = 0;
    for (const ref::TensorMap* src : sources) {
      auto it = src->find(name);
      if (it == src->end() || it->second.rank() != first.rank() ||
          it->second.dtype() != first.dtype() ||
          !std::equal(it->second.shape().begin() + 1, it->second.shape().end(),
                      first.shape().begin() + 1)) {
        return absl::InvalidArgumentError("'" + name + "' differs between the row sources");
      }
      parts.push_back(&it->second);
      total += it->second.dim(0);
    }
    if (total == 0) return absl::InvalidArgumentError("'" + name + "' has no rows");
    std::vector<int64_t> shape = first.shape();
    shape[0] = rows;
    Tensor t(first.dtype(), shape);
    const size_t row_bytes = first.dim(0) > 0 ? first.nbytes() / first.dim(0) : 0;
    for (int64_t r = 0; r < rows; ++r) {
      int64_t k = r % total;
      size_t p = 0;
      while (k >= parts[p]->dim(0)) k -= parts[p++]->dim(0);
      std::memcpy(static_cast<char*>(t.raw_mutable()) + r * row_bytes,
                  static_cast<const char*>(parts[p]->raw()) + k * row_bytes, row_bytes);
    }
    out[name] = std::move(t);
  }
  return out;
}

Divergence CompareOutputs(const ref::TensorMap& want, const ref::TensorMap& got,
                          const Tolerance& tol) {
  Divergence d;
  for (const auto& [name, w] : want) {
    auto it = got.find(name);
    if (it == got.end()) {
      d.ok = false;
      d.message = "output '" + name + "' missing";
      continue;
    }
    Tolerance t = tol;
    if (auto floor = tol.output_atol.find(name); floor != tol.output_atol.end()) {
      t.atol = std::max(t.atol, floor->second);
    }
    const Divergence one = CompareTensors(it->second, w, t);
    d.max_abs_err = std::max(d.max_abs_err, one.max_abs_err);
    d.max_rel_err = std::max(d.max_rel_err, one.max_rel_err);
    d.norm_rel_err = std::max(d.norm_rel_err, one.norm_rel_err);
    if (!one.ok && d.ok) d.message = "output '" + name + "': " + one.message;
    d.ok = d.ok && one.ok;
  }
  return d;
}

namespace {

bool HasQuantize(const Graph& g) {
  for (const auto& n : g.nodes()) {
    if (n->domain.empty() && (n->op_type == "QuantizeLinear" || n->op_type == "QLinearConv" ||
                              n->op_type == "QLinearMatMul")) {
      return true;
    }
  }
  return false;
}

}  // namespace

Tolerance ForQuantizedGraph(const Graph& raw, const ref::TensorMap& want, Tolerance base) {
  if (!HasQuantize(raw)) return base;
  for (const auto& [name, t] : want) {
    if (!IsFloatDType(t.dtype()) || t.numel() == 0) continue;
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (int64_t i = 0; i < t.numel(); ++i) {
      const double v = t.GetDouble(i);
      if (!std::isfinite(v)) continue;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    if (hi > lo) base.output_atol[name] = (hi - lo) / 255.0;
  }
  return base;
}

Tolerance ScaledToOutputs(const ref::TensorMap& want, Tolerance base) {
  for (const auto& [name, t] : want) {
    if (!IsFloatDType(t.dtype()) || t.numel() == 0) continue;
    double sum = 0;
    int64_t n = 0;
    for (int64_t i = 0; i < t.numel(); ++i) {
      const double v = t.GetDouble(i);
      if (!std::isfinite(v)) continue;
      sum += v * v;
      ++n;
    }
    if (n == 0) continue;
    const double floor = base.rtol * std::sqrt(sum / static_cast<double>(n));
    double& atol = base.output_atol[name];
    atol = std::max(atol, floor);
  }
  return base;
}

absl::StatusOr<BisectResult> BisectPasses(const Graph& raw,
                                          const std::vector<std::unique_ptr<passes::Pass>>& list,
                                          const ref::TensorMap& inputs, const Tolerance& tol) {
  ASSIGN_OR_RETURN(ref::TensorMap want, ref::Run(raw, inputs));
  std::unique_ptr<Graph> g = raw.Clone();
  BisectResult result;
  for (const auto& pass : list) {
    ASSIGN_OR_RETURN(passes::PassStats stats, pass->Run(*g, /*verify=*/true));
    PassOutcome outcome;
    outcome.pass = stats.name;
    if (stats.changed) {
      ASSIGN_OR_RETURN(ref::TensorMap got, ref::Run(*g, inputs));
      outcome.divergence = CompareOutputs(want, got, tol);
    } else if (!result.passes.empty()) {
      outcome.divergence = result.passes.back().divergence;  // nothing moved
    }
    result.passes.push_back(outcome);
    if (!outcome.divergence.ok) {
      result.ok = false;
      result.first_bad_pass = stats.name;
      break;
    }
  }
  return result;
}

absl::StatusOr<BisectResult> BisectPipeline(const Graph& raw, const PipelineOptions& options,
                                            const ref::TensorMap& inputs, const Tolerance& tol) {
  std::vector<std::unique_ptr<passes::Pass>> list;
  for (const std::string& name : PipelinePasses(options.level)) {
    if (options.disabled.count(name)) continue;
    ASSIGN_OR_RETURN(std::unique_ptr<passes::Pass> pass, MakePass(name));
    list.push_back(std::move(pass));
  }
  return BisectPasses(raw, list, inputs, tol);
}

}  // namespace kiln::check

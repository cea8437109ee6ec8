#include "runtime/check/differential.h"

#include <cmath>
#include <random>
#include <sstream>

namespace kiln::check {

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
    if (in->dtype == DType::kBool) lo = 0, hi = 1;
    if (!IsSupportedDType(in->dtype)) {
      return absl::UnimplementedError("input '" + in->name + "' has unsupported dtype " +
                                      DTypeName(in->dtype));
    }
    std::uniform_real_distribution<double> real(lo, hi);
    std::uniform_int_distribution<int64_t> integer(static_cast<int64_t>(lo),
                                                   static_cast<int64_t>(hi));
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (is_float) {
        t.SetDouble(i, real(rng));
      } else {
        t.SetInt(i, integer(rng));
      }
    }
    out[in->name] = std::move(t);
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
    const Divergence one = CompareTensors(it->second, w, tol);
    d.max_abs_err = std::max(d.max_abs_err, one.max_abs_err);
    d.max_rel_err = std::max(d.max_rel_err, one.max_rel_err);
    if (!one.ok && d.ok) d.message = "output '" + name + "': " + one.message;
    d.ok = d.ok && one.ok;
  }
  return d;
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

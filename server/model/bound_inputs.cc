#include "server/model/bound_inputs.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kiln::server {
namespace {

absl::Status Bad(const std::string& name, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("bind_inputs: input '", name, "' ", why));
}

// The merged decoder's switch: a bool input of one element named use_cache_branch.
bool IsCacheSwitch(const Value& v) {
  return v.name == kUseCacheBranch && v.dtype == DType::kBool && v.shape && IsStatic(*v.shape) &&
         Tensor(DType::kBool, StaticDims(*v.shape)).numel() == 1;
}

absl::StatusOr<Tensor> BoundValue(const Value& v, const std::vector<double>& values) {
  if (!v.shape || !IsStatic(*v.shape)) {
    return Bad(v.name, "has symbolic dims: only an input of fixed shape can be bound");
  }
  Tensor t(v.dtype, StaticDims(*v.shape));
  if (values.size() != 1 && static_cast<int64_t>(values.size()) != t.numel()) {
    return Bad(v.name, absl::StrCat("holds ", t.numel(), " elements; give 1 value or ", t.numel(),
                                    ", not ", values.size()));
  }
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double x = values[values.size() == 1 ? 0 : static_cast<size_t>(i)];
    if (v.dtype == DType::kBool) {
      t.SetInt(i, x != 0.0);
    } else if (IsIntegerDType(v.dtype)) {
      if (x != std::floor(x)) {
        return Bad(v.name, absl::StrCat("is ", DTypeName(v.dtype), ": ", x, " is no integer"));
      }
      t.SetInt(i, static_cast<int64_t>(x));
    } else if (IsFloatDType(v.dtype)) {
      t.SetDouble(i, x);
    } else {
      return Bad(v.name, absl::StrCat("is ", DTypeName(v.dtype), ": only numbers and bools bind"));
    }
  }
  return t;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> BindInputs(Graph& graph, const ModelConfig& config) {
  std::map<std::string, std::vector<double>> binds = config.bind_inputs;
  std::vector<std::string> lines;
  for (const Value* v : graph.inputs) {
    if (config.generation.mode != "off" && !binds.count(kUseCacheBranch) && IsCacheSwitch(*v)) {
      binds[kUseCacheBranch] = {1.0};
    }
  }
  for (const auto& [name, values] : binds) {
    auto it = std::find_if(graph.inputs.begin(), graph.inputs.end(),
                           [&](const Value* v) { return v->name == name; });
    if (it == graph.inputs.end()) {
      std::vector<std::string> names;
      for (const Value* v : graph.inputs) names.push_back(v->name);
      return Bad(name, absl::StrCat("is not an input of the model (its inputs: ",
                                    absl::StrJoin(names, ", "), ")"));
    }
    Value* v = *it;
    ASSIGN_OR_RETURN(Tensor t, BoundValue(*v, values));
    const bool automatic = !config.bind_inputs.count(name);
    lines.push_back(
        absl::StrCat(name, " = ",
                     v->dtype == DType::kBool ? (values[0] != 0 ? "true" : "false")
                                              : absl::StrJoin(values, ", "),
                     automatic ? " (a merged decoder: served as its cache branch)" : ""));
    v->constant = std::move(t);
    graph.inputs.erase(it);
  }
  return lines;
}

std::string BoundInputsKey(const ModelConfig& config) {
  std::string key = config.generation.mode == "off" ? "merged:off" : "merged:cache";
  for (const auto& [name, values] : config.bind_inputs) {
    absl::StrAppend(&key, ";", name, "=", absl::StrJoin(values, ","));
  }
  return key;
}

}  // namespace kiln::server

#include "compiler/shape/bind_values.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kiln::shape {
namespace {

absl::Status Bad(const std::string& name, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("input '", name, "' ", why));
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

absl::Status BindInputValues(Graph& graph,
                             const std::map<std::string, std::vector<double>>& values) {
  for (const auto& [name, v] : values) {
    auto it = std::find_if(graph.inputs.begin(), graph.inputs.end(),
                           [&](const Value* in) { return in->name == name; });
    if (it == graph.inputs.end()) {
      std::vector<std::string> names;
      for (const Value* in : graph.inputs) names.push_back(in->name);
      return Bad(name, absl::StrCat("is not an input of the model (its inputs: ",
                                    absl::StrJoin(names, ", "), ")"));
    }
    if (v.empty()) return Bad(name, "needs at least one value");
    ASSIGN_OR_RETURN(Tensor t, BoundValue(**it, v));
    (*it)->constant = std::move(t);
    graph.inputs.erase(it);
  }
  return absl::OkStatus();
}

}  // namespace kiln::shape

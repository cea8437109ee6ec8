#include "server/model/bound_inputs.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/shape/bind_values.h"

namespace kiln::server {
namespace {

// The merged decoder's switch: a bool input of one element named use_cache_branch.
bool IsCacheSwitch(const Value& v) {
  return v.name == kUseCacheBranch && v.dtype == DType::kBool && v.shape && IsStatic(*v.shape) &&
         Tensor(DType::kBool, StaticDims(*v.shape)).numel() == 1;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> BindInputs(Graph& graph, const ModelConfig& config) {
  std::map<std::string, std::vector<double>> binds = config.bind_inputs;
  for (const Value* v : graph.inputs) {
    if (config.generation.mode != "off" && !binds.count(kUseCacheBranch) && IsCacheSwitch(*v)) {
      binds[kUseCacheBranch] = {1.0};
    }
  }
  if (absl::Status s = shape::BindInputValues(graph, binds); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("bind_inputs: ", s.message()));
  }
  std::vector<std::string> lines;
  for (const auto& [name, values] : binds) {
    lines.push_back(absl::StrCat(
        name, " = ",
        graph.FindValue(name)->dtype == DType::kBool ? (values[0] != 0 ? "true" : "false")
                                                     : absl::StrJoin(values, ", "),
        config.bind_inputs.count(name) ? "" : " (a merged decoder: served as its cache branch)"));
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

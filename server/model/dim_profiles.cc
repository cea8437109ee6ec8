#include "server/model/dim_profiles.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <memory>
#include <set>

#include "absl/strings/str_cat.h"
#include "compiler/shape/dim_expr.h"
#include "compiler/shape/infer.h"

namespace kiln::server {

bool ShapesInferAt(const Graph& model, const std::map<std::string, int64_t>& dims) {
  std::unique_ptr<Graph> g = model.Clone();
  return shape::Specialize(*g, 1, dims).ok();
}

std::vector<std::string> OpenDims(const Graph& model) {
  std::vector<std::string> names;
  std::set<std::string> batch;  // a symbol at dim 0 is the batch wherever else it appears
  for (const Value* in : model.inputs) {
    if (in->shape && !in->shape->empty() && !(*in->shape)[0].known()) {
      batch.insert((*in->shape)[0].param);
    }
  }
  for (const Value* in : model.inputs) {
    if (!in->shape) continue;
    for (size_t i = 1; i < in->shape->size(); ++i) {
      const Dim& d = (*in->shape)[i];
      // A dim written as an expression ("past + 1") follows the symbols it names.
      if (d.known() || d.param.empty() || batch.count(d.param) || shape::IsDimExpr(d.param)) {
        continue;
      }
      if (std::find(names.begin(), names.end(), d.param) == names.end()) names.push_back(d.param);
    }
  }
  return names;
}

namespace {

// The size nearest `far` that infers, between `near` (which infers) and `far` (tried first):
// sizes that infer are taken to be one interval, so a bisection finds its end.
int64_t EdgeThatInfers(const Graph& model, std::map<std::string, int64_t> dims,
                       const std::string& name, int64_t near, int64_t far) {
  dims[name] = far;
  if (ShapesInferAt(model, dims)) return far;
  while (far - near > 1 || near - far > 1) {  // near infers, far does not
    const int64_t mid = near + (far - near) / 2;
    dims[name] = mid;
    (ShapesInferAt(model, dims) ? near : far) = mid;
  }
  return near;
}

absl::Status NoProfile(const std::string& name, int64_t size) {
  return absl::InvalidArgumentError(
      absl::StrCat("symbolic dim '", name, "': the model's shapes do not infer at size ", size,
                   "; give its sizes in the model config (dynamic_dims: {", name,
                   ": {min: N, max: N, typical: N}}) or fix it (input_shapes)"));
}

// One dim's profile; `typicals` holds every open dim's typical size (this one's included,
// lowered here when the model's shapes stop below the default).
absl::Status Resolve(const Graph& model, const std::string& name,
                     std::map<std::string, int64_t>& typicals, ModelConfig& config) {
  auto given = config.dynamic_dim_ranges.find(name);
  const bool range_given = given != config.dynamic_dim_ranges.end();
  int64_t lo = range_given ? given->second.first : 1;
  int64_t hi = range_given ? given->second.second : 0;
  const bool typical_given = config.dynamic_dims.count(name) > 0;
  int64_t typical = typicals.at(name);
  if (hi > 0 && typical_given) {  // nothing to take from the model
    config.dynamic_dim_ranges[name] = {lo, hi};
    return absl::OkStatus();
  }
  if (!ShapesInferAt(model, typicals)) {
    // A table smaller than the default size (a 64-position model): the largest size below
    // it that infers becomes the typical size and the max.
    std::map<std::string, int64_t> at_min = typicals;
    at_min[name] = lo;
    if (typical_given || !ShapesInferAt(model, at_min)) return NoProfile(name, typical);
    typical = EdgeThatInfers(model, typicals, name, lo, typical);
    hi = hi > 0 ? std::min(hi, typical) : typical;
  } else if (hi == 0) {
    hi = EdgeThatInfers(model, typicals, name, typical, std::max(typical, kDefaultMaxDim));
    if (!range_given) lo = EdgeThatInfers(model, typicals, name, typical, 1);
  }
  if (typical < lo || typical > hi) {
    return absl::InvalidArgumentError(absl::StrCat("dynamic_dims.", name, ": typical ", typical,
                                                   " is outside the model's sizes [", lo, ", ", hi,
                                                   "]"));
  }
  typicals[name] = typical;
  config.dynamic_dims[name] = typical;
  config.dynamic_dim_ranges[name] = {lo, hi};
  spdlog::info("symbolic dim '{}': sizes [{}, {}], built and checked at {}", name, lo, hi, typical);
  return absl::OkStatus();
}

}  // namespace

absl::Status ResolveDimProfiles(const Graph& model, ModelConfig& config,
                                const std::map<std::string, int64_t>& preferred) {
  const std::vector<std::string> open = OpenDims(model);
  for (const auto& kv : config.dynamic_dim_ranges) {
    if (std::find(open.begin(), open.end(), kv.first) == open.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("dynamic_dims names '", kv.first,
                       "', which is no symbolic input dim left open by input_shapes"));
    }
  }
  std::map<std::string, int64_t> typicals;
  for (const std::string& name : open) {
    auto it = config.dynamic_dims.find(name);
    if (it != config.dynamic_dims.end()) {
      typicals[name] = it->second;
    } else {
      auto r = config.dynamic_dim_ranges.find(name);
      const int64_t lo = r != config.dynamic_dim_ranges.end() ? r->second.first : 1;
      const int64_t hi = r != config.dynamic_dim_ranges.end() && r->second.second > 0
                             ? r->second.second
                             : kDefaultMaxDim;
      auto p = preferred.find(name);
      typicals[name] = std::clamp(p != preferred.end() ? p->second : kDefaultTypicalDim, lo, hi);
    }
  }
  for (const std::string& name : open) RETURN_IF_ERROR(Resolve(model, name, typicals, config));
  return absl::OkStatus();
}

}  // namespace kiln::server

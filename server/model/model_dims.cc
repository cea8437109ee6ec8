#include "server/model/model_dims.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <memory>
#include <set>

#include "absl/strings/str_cat.h"
#include "base/elapsed.h"
#include "compiler/shape/bind_dims.h"
#include "compiler/shape/dim_expr.h"
#include "compiler/shape/infer.h"
#include "server/model/decoder_dims.h"
#include "server/model/dim_profiles.h"
#include "server/model/padding_proof.h"
#include "server/model/warmup_check.h"

namespace kiln::server {
namespace {

using Clock = std::chrono::steady_clock;

// A dim written as an expression of dynamic symbols only ("past + sequence").
bool DerivedFromDynamic(const std::string& param, const ModelConfig& config) {
  if (!shape::IsDimExpr(param)) return false;
  for (const std::string& name : shape::DimExprSymbols(param)) {
    if (!config.dynamic_dims.count(name)) return false;
  }
  return true;
}

}  // namespace

absl::Status BindConfigDims(Graph& g, ModelConfig& config, const WarmupSamples& samples,
                            DimSymbols& symbols) {
  shape::InputDims fixed;
  fixed.shapes = config.input_shapes;
  RETURN_IF_ERROR(shape::BindInputDims(g, fixed));
  const std::string decoder = ApplyDecoderDims(g, config);
  if (!decoder.empty()) spdlog::info("{}", decoder);
  const std::string wide = ApplyWideRuns(g, config);
  if (!wide.empty()) spdlog::info("{}", wide);
  RETURN_IF_ERROR(ResolveDimProfiles(g, config, SampleDims(samples, g)));
  if (config.dynamic_dims.empty()) return absl::OkStatus();
  std::set<std::string> seen;
  for (const Value* in : g.inputs) {
    std::vector<std::string>& row = symbols.emplace_back(in->shape ? in->shape->size() : 0);
    for (size_t i = 0; i < row.size(); ++i) {
      const Dim& d = (*in->shape)[i];
      if (!d.known() && i > 0 && DerivedFromDynamic(d.param, config)) {
        row[i] = d.param;  // "past + 1": its size follows, checked per request
        continue;
      }
      if (d.known() || !config.dynamic_dims.count(d.param)) continue;
      if (i == 0) {  // the batch dim varies per request already (batch_buckets)
        return absl::InvalidArgumentError(absl::StrCat(
            "dynamic_dims names '", d.param, "', dim 0 of input '", in->name, "' (the batch)"));
      }
      row[i] = d.param;
      seen.insert(d.param);
    }
  }
  for (const auto& [name, size] : config.dynamic_dims) {
    if (!seen.count(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("dynamic_dims names '", name,
                       "', which is no symbolic input dim left open by input_shapes"));
    }
  }
  shape::InputDims dynamic;
  dynamic.symbols = config.dynamic_dims;
  return shape::BindInputDims(g, dynamic);
}

void MarkDynamicDims(const Graph& model, const ModelConfig& config, DimSymbols symbols,
                     ModelSignature& sig) {
  if (config.dynamic_dims.empty()) return;
  for (size_t k = 0; k < sig.inputs.size() && k < symbols.size(); ++k) {
    for (size_t i = 0; i < symbols[k].size() && i < sig.inputs[k].shape.size(); ++i) {
      if (!symbols[k][i].empty()) sig.inputs[k].shape[i] = -1;
    }
  }
  std::unique_ptr<Graph> open = model.Clone();
  shape::InputDims fixed;
  fixed.shapes = config.input_shapes;
  // On failure the declared output shapes stand in for the inferred ones.
  if (shape::BindInputDims(*open, fixed).ok()) (void)shape::InferShapes(*open);
  for (runtime::TensorSpec& out : sig.outputs) {
    for (const Value* v : open->outputs) {
      if (v->name != out.name) continue;
      for (size_t i = 0; i < out.shape.size(); ++i) {
        if (!v->shape || i >= v->shape->size() || !(*v->shape)[i].known()) out.shape[i] = -1;
      }
    }
  }
  sig.dim_symbols = std::move(symbols);
  sig.default_dims = config.dynamic_dims;
  sig.dim_ranges = config.dynamic_dim_ranges;
}

void ProveClasses(const Graph& model, const ModelConfig& config, BuiltModel& m) {
  const Clock::time_point t0 = Clock::now();
  std::unique_ptr<Graph> open = model.Clone();
  shape::InputDims fixed;
  fixed.shapes = config.input_shapes;
  const absl::Status bound = shape::BindInputDims(*open, fixed);
  absl::StatusOr<PaddingPlan> plan =
      bound.ok() ? ProvePadding(
                       *open, config, m.signature.dim_symbols,
                       [&](const Graph& g) { return RangesOf(config.warmup, g); }, kMaxShapeClasses)
                 : absl::StatusOr<PaddingPlan>(bound);
  if (plan.ok()) {
    m.padding = std::move(*plan);
  } else {
    m.padding_refused = std::string(plan.status().message());
  }
  m.times.padding_ms = MsSince(t0);
}

}  // namespace kiln::server

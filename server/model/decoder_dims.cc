#include "server/model/decoder_dims.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "runtime/check/input_hints.h"
#include "server/generate/decoder_contract.h"
#include "server/model/dim_profiles.h"
#include "server/model/padding_proof.h"

namespace kiln::server {
namespace {

runtime::TensorSpec Declared(const Value& v, std::vector<std::string>* symbols) {
  runtime::TensorSpec s{v.name, v.dtype, {}};
  if (!v.shape) return s;
  for (const Dim& d : *v.shape) {
    s.shape.push_back(d.known() ? d.value : -1);
    if (symbols) symbols->push_back(d.known() ? "" : d.param);
  }
  return s;
}

// Whether the config says anything about `symbol`'s sizes.
bool Given(const ModelConfig& c, const std::string& symbol) {
  // (input_shapes, keyed by input name, are already bound into the graph by then: a dim they
  // fix is no symbol of the declared signature.)
  return c.dynamic_dims.count(symbol) || c.dynamic_dim_ranges.count(symbol) ||
         c.dynamic_dim_classes.count(symbol);
}

}  // namespace

ModelSignature DeclaredSignature(const Graph& model) {
  ModelSignature sig;
  sig.batchable = true;
  for (const Value* v : model.inputs) {
    std::vector<std::string>& symbols = sig.dim_symbols.emplace_back();
    sig.inputs.push_back(Declared(*v, &symbols));
    for (size_t d = 1; d < symbols.size(); ++d) {
      if (!symbols[d].empty()) sig.default_dims.emplace(symbols[d], 1);
    }
  }
  for (const Value* v : model.outputs) sig.outputs.push_back(Declared(*v, nullptr));
  return sig;
}

std::string ApplyWideRuns(const Graph& model, ModelConfig& config) {
  if (config.generation.mode == "off" || config.instances < 2 || config.cpu_threads != 0 ||
      config.device != "cpu") {
    return "";
  }
  if (!generate::FindDecoderContract(DeclaredSignature(model), config.generation.tensors).ok()) {
    return "";
  }
  config.cpu_wide_runs = true;
  return absl::StrCat("wide runs: engines built on ", CpuBuildThreads(config),
                      " threads, each step on ", CpuThreadsPerInstance(config),
                      " while several run side by side, on all when one runs alone");
}

std::string ApplyDecoderDims(const Graph& model, ModelConfig& config) {
  if (config.generation.mode == "off") return "";
  absl::StatusOr<generate::DecoderContract> c =
      generate::FindDecoderContract(DeclaredSignature(model), config.generation.tensors);
  if (!c.ok() || Given(config, c->past_symbol) || Given(config, c->sequence_symbol)) return "";
  // The context: the rows of the table the position ids index, within what classes serve.
  int64_t context = kMaxClassSize;
  std::string why = absl::StrCat("the default context of ", kMaxClassSize);
  if (c->has_positions()) {
    const auto hints = check::InferInputHints(model);
    auto h = hints.find(model.inputs[c->position_ids]->name);
    if (h != hints.end() && !h->second.binary && h->second.hi >= 1) {
      context = std::min(context, static_cast<int64_t>(h->second.hi) + 1);
      why = absl::StrCat("position_ids ", h->second.why);
    }
  }
  if (context < 2) return "";
  const int64_t chunk = std::clamp<int64_t>(config.generation.prefill_chunk, 1, context - 1);
  // From 0: a decoder that runs at exact lengths (no mask) starts with an empty cache; one
  // served by shape classes pads that to its first class.
  config.dynamic_dim_ranges[c->past_symbol] = {0, context - 1};
  config.dynamic_dims[c->past_symbol] = std::min<int64_t>(kDefaultTypicalDim, context - 1);
  config.dynamic_dim_ranges[c->sequence_symbol] = {1, chunk};
  config.dynamic_dims[c->sequence_symbol] = 1;
  config.dynamic_dim_classes[c->sequence_symbol] =
      chunk > 1 ? std::vector<int64_t>{1, chunk} : std::vector<int64_t>{1};
  return absl::StrCat("decoder dims (none in the config): '", c->past_symbol, "' [0, ", context - 1,
                      "] (", why, "), '", c->sequence_symbol, "' [1, ", chunk,
                      "] in classes 1 and ", chunk, " (decode steps, prompt chunks)");
}

}  // namespace kiln::server

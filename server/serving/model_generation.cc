// ModelVersion::StartGeneration: a READY decoder's generation loop, wired to the version's
// own batcher and shape classes (declared in server/serving/model_registry.h).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <optional>

#include "server/metrics/generation_metrics.h"
#include "server/serving/model_registry.h"
#include "server/serving/request_validation.h"

namespace kiln::server {
namespace {

// The past size a step runs at: the smallest class holding `n` (and the range's start).
generate::PastSizeFn PastSizes(std::vector<int64_t> classes, int64_t min) {
  return [classes = std::move(classes), min](int64_t n) {
    n = std::max(n, min);
    auto it = std::lower_bound(classes.begin(), classes.end(), n);
    return it == classes.end() ? n : *it;
  };
}

}  // namespace

std::string ModelVersion::ExactLengthsReason(const generate::DecoderContract& contract) const {
  if (!contract.has_mask()) {
    return absl::StrCat("no input '", config_.generation.tensors.attention_mask,
                        "': nothing would hide a padded cache");
  }
  if (built_.padding && built_.padding->classes.count(contract.past_symbol)) return "";
  return absl::StrCat(
      "no shape classes over '", contract.past_symbol,
      "': ", built_.padding_refused.empty() ? "shape_classes is off" : built_.padding_refused);
}

bool ModelVersion::AppendsCacheInPlace(const generate::DecoderContract& contract) {
  setup_appending_ = false;
  if (config_.generation.kv_in_place == "off") return false;
  const ModelSignature& sig = built_.signature;
  if (sig.outputs.size() != contract.cache.size() + 1) return false;
  auto appends = [&](const runtime::Engine& e) {
    const std::vector<runtime::InPlaceAppend> pairs = e.in_place_appends();
    return std::all_of(contract.cache.begin(), contract.cache.end(),
                       [&](const generate::CacheTensor& c) {
                         return std::any_of(pairs.begin(), pairs.end(), [&](const auto& p) {
                           return e.inputs()[p.input].name == sig.inputs[c.input].name &&
                                  e.outputs()[p.output].name == sig.outputs[c.output].name;
                         });
                       });
  };
  bool all = !built_.engines.empty();
  for (const auto& [bucket, instances] : built_.engines) {
    for (const auto& e : instances) all = all && appends(*e);
  }
  setup_appending_ = all && shapes_ && shapes_->EveryEngine(appends);
  if (setup_appending_ && last_shapes_ && !last_shapes_->EveryEngine(appends)) {
    DropLastPositionEngines("its engines do not append the cache in place, the model's do");
  }
  return setup_appending_;
}

std::shared_ptr<const generate::Tokenizer> ModelVersion::LoadTokenizer() {
  if (folder_.empty()) return nullptr;
  // The version's folder first, then the model's (shared by its versions).
  const std::filesystem::path version_dir(folder_);
  for (const auto& dir : {version_dir, version_dir.parent_path()}) {
    const std::filesystem::path file = dir / "tokenizer.model";
    if (!std::filesystem::exists(file)) continue;
    absl::StatusOr<std::unique_ptr<generate::Tokenizer>> t = generate::Tokenizer::Load(file);
    if (!t.ok()) {
      tokenizer_refused_ = std::string(t.status().message());
      spdlog::warn("model {} version {}: token ids only: {}", name_, version_, tokenizer_refused_);
      return nullptr;
    }
    spdlog::info("model {} version {}: text in and out with {} ({} pieces)", name_, version_,
                 file.string(), (*t)->vocab_size());
    return std::shared_ptr<const generate::Tokenizer>(std::move(*t));
  }
  return nullptr;
}

std::optional<ModelVersion::GenerationDims> ModelVersion::FindGenerationDims(
    const generate::DecoderContract& contract) {
  const ModelSignature& sig = built_.signature;
  const auto past = sig.dim_ranges.find(contract.past_symbol);
  const auto seq = sig.dim_ranges.find(contract.sequence_symbol);
  if (past == sig.dim_ranges.end() || seq == sig.dim_ranges.end()) {
    generation_refused_ =
        absl::StrCat("'", contract.past_symbol, "' and '", contract.sequence_symbol,
                     "' need ranges of their own (dynamic_dims)");
    return std::nullopt;
  }
  std::string exact = ExactLengthsReason(contract);
  if (!exact.empty() && past->second.first != 0) {
    generation_refused_ = absl::StrCat("steps must run at exact cache lengths (", exact,
                                       "), and a prompt's first step has an empty cache: give "
                                       "dynamic_dims '",
                                       contract.past_symbol, "' a range from 0");
    return std::nullopt;
  }
  exact_lengths_ = std::move(exact);
  return GenerationDims{past->second, seq->second};
}

int64_t ModelVersion::ShortChunksFrom(const generate::DecoderContract& contract,
                                      int64_t chunk) const {
  // The counts that a shape class pads to the chunk anyway: above the next smaller class.
  int64_t below = 1;
  auto cls = built_.padding->classes.find(contract.sequence_symbol);
  if (cls != built_.padding->classes.end()) {
    for (int64_t c : cls->second) {
      if (c < chunk) below = std::max(below, c);
    }
  }
  return below + 1 < chunk ? below + 1 : 0;
}

generate::StepFn ModelVersion::StepVia(bool last, bool appending) {
  return [this, last, appending](std::vector<Tensor> in, int64_t rows,
                                 std::vector<Tensor> reuse) -> absl::StatusOr<std::vector<Tensor>> {
    // The loop batched its sequences already: the step runs at once (inline on the loop's
    // thread when the engine is idle), not after max_queue_delay, into the last outputs of
    // its shape.
    RunHints hints;
    hints.run_now = true;
    hints.outputs = std::move(reuse);
    hints.append_in_place = appending;
    if (!last) {
      ASSIGN_OR_RETURN(auto f,
                       Submit(std::move(in), rows, std::nullopt, nullptr, std::move(hints)));
      return f.get();
    }
    ASSIGN_OR_RETURN(DimValues dims, DynamicDimValues(built_.signature, in));
    ASSIGN_OR_RETURN(auto f, last_shapes_->Enqueue(dims, std::move(in), rows, std::nullopt, nullptr,
                                                   nullptr, std::move(hints)));
    return f.get();
  };
}

absl::Status ModelVersion::StartGeneration() {
  const generate::GenerationConfig& gc = config_.generation;
  if (gc.mode == "off") {
    generation_refused_ = "generation.mode is off";
    return absl::OkStatus();
  }
  absl::StatusOr<generate::DecoderContract> contract =
      generate::FindDecoderContract(built_.signature, gc.tensors);
  if (!contract.ok()) {
    generation_refused_ = std::string(contract.status().message());
    return absl::OkStatus();
  }
  const std::optional<GenerationDims> dims = FindGenerationDims(*contract);
  if (!dims) return absl::OkStatus();
  const ModelSignature& sig = built_.signature;
  generate::GeneratorSetup setup;
  setup.contract = *contract;
  setup.signature = sig;
  setup.config = gc;
  setup.max_rows = sig.batchable ? built_.buckets.back() : 1;
  setup.min_step = dims->sequence.first;
  setup.max_step = dims->sequence.second;
  setup.max_context = dims->past.second;
  setup.exact = !exact_lengths_.empty();
  setup.rows_share_length = built_.cache_mask.rows_share_length;
  setup.lanes = config_.instances;  // each shape's engines run that many steps at once
  setup.step = StepVia(false, false);
  const int64_t chunk = std::min(gc.prefill_chunk, dims->sequence.second);
  if (setup.exact) {
    DropLastPositionEngines("steps run at exact cache lengths");
    return CreateGenerator(std::move(setup));
  }
  setup.past_size = PastSizes(built_.padding->classes.at(contract->past_symbol), dims->past.first);
  BuildLastPositionEngines(*contract, chunk);
  if (AppendsCacheInPlace(*contract)) {
    setup.buckets = sig.batchable ? built_.buckets : std::vector<int64_t>{1};
    auto cls = built_.padding->classes.find(contract->sequence_symbol);
    setup.append_counts = cls != built_.padding->classes.end()
                              ? cls->second
                              : std::vector<int64_t>{dims->sequence.first};  // a fixed size
    setup.step_appending = StepVia(false, true);
    if (last_shapes_) setup.step_last_appending = StepVia(true, true);
  }
  if (last_shapes_) {
    setup.step_last = StepVia(true, false);
    setup.last_count = chunk;
    if (last_by_mask_) setup.last_from = ShortChunksFrom(*contract, chunk);
  }
  return CreateGenerator(std::move(setup));
}

absl::Status ModelVersion::CreateGenerator(generate::GeneratorSetup setup) {
  const generate::GenerationConfig& gc = config_.generation;
  const bool exact = setup.exact;
  const int64_t context = setup.max_context;
  setup.hooks = metrics::GenerationHooksFor(name_);
  setup.tokenizer = LoadTokenizer();
  absl::StatusOr<std::unique_ptr<generate::Generator>> made =
      generate::Generator::Create(std::move(setup), ProcessMemory());
  if (!made.ok() && exact) {
    // Such a model served Predict before it could generate: it keeps doing so.
    generation_refused_ = std::string(made.status().message());
    exact_lengths_.clear();
    spdlog::warn("model {} version {}: no generation: {}", name_, version_, generation_refused_);
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(generator_, std::move(made));
  spdlog::info(
      "model {} version {}: generating (context {}, kv cache {} pages of {} positions, "
      "{} bytes; {})",
      name_, version_, context, generator_->stats().pages_total, gc.page_tokens, gc.kv_cache_bytes,
      setup_appending_ ? "steps append to the cache in place" : "steps copy the cache in and out");
  if (exact) {
    spdlog::warn(
        "model {} version {}: generation steps run at exact cache lengths ({}): each new length "
        "builds an engine on its first step, far slower than shape classes",
        name_, version_, exact_lengths_);
  }
  return absl::OkStatus();
}

}  // namespace kiln::server

#include "server/model/warmup_samples.h"

#include <onnx/onnx_pb.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "compiler/onnx/tensor_proto.h"
#include "runtime/check/differential.h"
#include "server/model/engine_cache.h"

namespace kiln::server {
namespace fs = std::filesystem;
namespace {

// One set: input_0.pb, input_1.pb, ... until one is missing.
absl::StatusOr<ref::TensorMap> ReadSet(const fs::path& dir, const Graph& model,
                                       std::string& bytes) {
  ref::TensorMap set;
  for (size_t k = 0;; ++k) {
    const fs::path p = dir / ("input_" + std::to_string(k) + ".pb");
    if (!fs::exists(p)) return set;
    std::ifstream f(p, std::ios::binary);
    std::stringstream content;
    content << f.rdbuf();
    onnx::TensorProto proto;
    if (!proto.ParseFromString(content.str()) || !proto.has_data_type()) {
      return absl::InvalidArgumentError(p.string() + " is not a TensorProto");
    }
    bytes += content.str();
    std::string name = proto.name();
    const bool named = std::any_of(model.inputs.begin(), model.inputs.end(),
                                   [&](const Value* v) { return v->name == name; });
    if (!named) {
      if (k >= model.inputs.size()) {
        return absl::InvalidArgumentError(p.string() + ": the model has " +
                                          std::to_string(model.inputs.size()) + " inputs");
      }
      name = model.inputs[k]->name;
    }
    ASSIGN_OR_RETURN(Tensor t, onnx_io::TensorFromProto(proto));
    set[name] = std::move(t);
  }
}

}  // namespace

absl::StatusOr<WarmupSamples> ReadWarmupSamples(const std::string& dir, const Graph& model) {
  WarmupSamples out;
  std::error_code ec;
  if (dir.empty() || !fs::is_directory(dir, ec)) return out;
  std::vector<fs::path> sets;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0) {
      sets.push_back(e.path());
    }
  }
  std::sort(sets.begin(), sets.end());
  std::string bytes;
  for (const fs::path& s : sets) {
    ASSIGN_OR_RETURN(ref::TensorMap set, ReadSet(s, model, bytes));
    if (!set.empty()) out.sets.push_back(std::move(set));
  }
  if (!out.empty()) out.key = ContentHash(bytes);
  return out;
}

WarmupSamples SamplesFor(const Graph& model, ModelConfig& config) {
  if (!config.warmup.enabled) return {};
  absl::StatusOr<WarmupSamples> s = ReadWarmupSamples(config.warmup.samples_dir, model);
  if (!s.ok()) {
    spdlog::warn("warm-up samples in {}: {}; using random inputs", config.warmup.samples_dir,
                 std::string(s.status().message()));
    return {};
  }
  config.warmup.samples_key = s->key;
  if (!s->empty()) {
    spdlog::info("warm-up feed: {} sample set(s) from {}", s->sets.size(),
                 config.warmup.samples_dir);
  }
  return *std::move(s);
}

std::map<std::string, int64_t> SampleDims(const WarmupSamples& samples, const Graph& model) {
  std::map<std::string, int64_t> dims;
  if (samples.empty()) return dims;
  for (const Value* in : model.inputs) {
    auto it = samples.sets[0].find(in->name);
    if (it == samples.sets[0].end() || !in->shape ||
        in->shape->size() != it->second.shape().size()) {
      continue;
    }
    for (size_t i = 1; i < in->shape->size(); ++i) {
      const Dim& d = (*in->shape)[i];
      if (!d.known() && !d.param.empty()) dims.emplace(d.param, it->second.dim(i));
    }
  }
  return dims;
}

namespace {

bool Fits(const Tensor& t, const Value& in, bool batchable) {
  if (t.dtype() != in.dtype || !in.shape || t.shape().size() != in.shape->size()) return false;
  for (size_t i = batchable ? 1 : 0; i < in.shape->size(); ++i) {
    if (!(*in.shape)[i].known() || (*in.shape)[i].value != t.dim(i)) return false;
  }
  return !batchable || t.dim(0) > 0;
}

}  // namespace

std::vector<ref::TensorMap> SampleFeeds(const WarmupSamples& samples, const Graph& raw,
                                        bool batchable, size_t limit) {
  std::vector<ref::TensorMap> feeds;
  for (const ref::TensorMap& set : samples.sets) {
    if (feeds.size() >= limit) break;
    bool fits = true;
    for (const Value* in : raw.inputs) {
      auto it = set.find(in->name);
      fits = fits && it != set.end() && Fits(it->second, *in, batchable);
    }
    if (!fits) continue;
    if (!batchable) {
      feeds.push_back(set);
      continue;
    }
    ref::TensorMap only;  // the model's inputs, nothing else the set may carry
    for (const Value* in : raw.inputs) only[in->name] = set.at(in->name);
    const int64_t batch = (*raw.inputs[0]->shape)[0].value;
    absl::StatusOr<ref::TensorMap> tiled = check::TileRows({&only}, batch);
    if (tiled.ok()) feeds.push_back(*std::move(tiled));
  }
  return feeds;
}

std::optional<ref::TensorMap> SampleFeed(const WarmupSamples& samples, const Graph& raw,
                                         bool batchable) {
  std::vector<ref::TensorMap> feeds = SampleFeeds(samples, raw, batchable, 1);
  if (feeds.empty()) return std::nullopt;
  return std::move(feeds.front());
}

}  // namespace kiln::server

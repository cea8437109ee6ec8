// Sample inputs shipped beside a model, in the ONNX test layout: <model folder>/
// test_data_set_*/input_*.pb (TensorProto files, the sets in name order). When present they
// are what the warm-up check feeds first: real token ids, real masks, real images, instead of
// random values. A sample's shape also sets the typical size of a symbolic dim the config
// leaves open (dim_profiles.h), so the check runs at the sample's sequence length.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "ir/graph.h"
#include "ops/interpreter.h"
#include "server/model/model_config.h"

namespace kiln::server {

struct WarmupSamples {
  std::vector<ref::TensorMap> sets;  // by graph input name
  std::string key;                   // a content hash of every file read (engine cache key)
  bool empty() const { return sets.empty(); }
};

// Reads the sets under `dir` (none: empty, not an error). A tensor takes its proto name
// when that is an input of `model`, else the name of the model's input at its position. A
// file that is not a tensor, or a set naming too many inputs, is INVALID_ARGUMENT.
absl::StatusOr<WarmupSamples> ReadWarmupSamples(const std::string& dir, const Graph& model);

// The samples the warm-up check of `model` feeds, from config.warmup.samples_dir when the
// check runs; their hash becomes config.warmup.samples_key (the engine cache key). Samples
// that cannot be read are logged and left out: never a reason not to serve.
WarmupSamples SamplesFor(const Graph& model, ModelConfig& config);

// The sizes the first set gives the symbolic dims past dim 0 of `model`'s inputs.
std::map<std::string, int64_t> SampleDims(const WarmupSamples& samples, const Graph& model);

// A feed for `raw` (shapes static, the batch at dim 0 when `batchable`) from the first set
// that has every input with its dtype and its dims (past dim 0 when batchable: the set's
// rows are cycled to the batch); nullopt when none fits.
// Every set that fits, so (up to `limit`), in name order: int8's calibration data.
std::vector<ref::TensorMap> SampleFeeds(const WarmupSamples& samples, const Graph& raw,
                                        bool batchable, size_t limit);
std::optional<ref::TensorMap> SampleFeed(const WarmupSamples& samples, const Graph& raw,
                                         bool batchable);

}  // namespace kiln::server

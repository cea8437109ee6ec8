// Per-model configuration: batching, engines and the warm-up check. Comes from the server
// config's `model_defaults`, overridden key by key by the model's own config.yaml (or by the
// YAML sent with LoadModel).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "compiler/pipeline.h"
#include "server/generate/generation_config.h"

namespace YAML {
class Node;
}

namespace kiln::server {

struct WarmupConfig {
  bool enabled = true;
  uint64_t seed = 1234;
  double rtol = 1e-3, atol = 1e-4;
  double float_lo = -1.0, float_hi = 1.0;
  int64_t int_lo = 0, int_hi = 10;
  std::map<std::string, std::pair<double, double>> input_ranges;
  // Not a config key: the model's folder, set at load, where sample inputs may be shipped
  // (server/model/warmup_samples.h); and the samples' content hash (engine cache key).
  std::string samples_dir, samples_key;
};

// The arithmetic precision the engines may use (`precision: {mode: auto, max_abs_error: ..,
// max_rel_error: ..}`). float32 (the default) computes as the model says. auto lets the
// compiler lower the weight products to bfloat16 where the device multiplies bf16 natively
// (cpu: AVX512_BF16 or AMX); the warm-up check then holds every output's relative error
// ||engine - reference|| / ||reference|| within max_rel_error, with an element-wise guard
// (server/model/precision.h), and over the budget steps up [int8 ->] bf16 -> bf16-mixed -> float32,
// GetModel saying why.
struct PrecisionConfig {
  std::string mode = "float32";  // float32 | auto
  double max_abs_error = 1e-2, max_rel_error = 1e-2;
  // fastest: a lowered engine within the budget is served only when it also runs faster than
  // float32 (server/model/precision_speed.h); lowest: the lowest precision within the budget.
  std::string prefer = "fastest";
  // int8: true: auto tries int8 first (before bf16), the weight products quantized with
  // activation ranges calibrated on the warm-up inputs (server/model/calibration.h); off by
  // default, as a calibration is only as good as the inputs it saw (ship samples).
  bool int8 = false;
  // Not config keys: where auto starts (a shape's engines start at what the model's own
  // build settled on; empty: the device's lowest), and the model's int8 calibration, which
  // its shapes' engines reuse.
  std::string start;
  std::shared_ptr<const passes::Calibration> calibration;
  double int8_noise_kept = 1.0;  // with start int8-mixed: the share the model's build settled on
};

struct ModelConfig {
  int64_t max_batch_size = 8;
  std::vector<int64_t> batch_buckets;  // ascending, last == max_batch_size after Finalize
  int64_t max_queue_delay_us = 500;
  int64_t max_queue_size = 256;
  int instances = 1;
  std::string device = "cpu";
  // cpu device: the engines' activation layout: tune (measure both at load, keep the faster),
  // primitive or blocked (runtime/cpu/cpu_engine.h).
  std::string cpu_layout = "tune";
  // cpu device: 3x3 stride-1 convolutions may run oneDNN's Winograd kernel, where its
  // heuristic takes it (batch >= 4) or, below that batch, where timed faster at build
  // (float32; a relative error of a few 1e-7, like the direct kernel's; docs/cpu-engine.md).
  // false: the direct kernel only.
  bool cpu_winograd = true;
  // cpu device: OpenMP threads per engine instance; 0: the cores divided among the instances
  // (at least 1), so instances running at once do not oversubscribe the machine.
  int cpu_threads = 0;
  // Set at load (never read from YAML): a decoder served by several instances builds each
  // engine on every core and runs it on CpuThreadsPerInstance unless its generation loop runs
  // a step alone (runtime/run_width.h): one stream then decodes on every core, many streams
  // run side by side on their share.
  bool cpu_wide_runs = false;
  OptLevel opt_level = OptLevel::kO2;
  std::set<std::string> disabled_passes;
  WarmupConfig warmup;
  PrecisionConfig precision;
  // Sizes for symbolic input dims other than the batch (a sequence length): input name ->
  // its whole shape, -1 keeping a dim as the model declares it. A size given for a named dim
  // applies to every input carrying that name (compiler/shape/bind_dims.h).
  std::map<std::string, std::vector<int64_t>> input_shapes;
  // Symbolic input dims served at any size (ONNX dim_param -> the size the model is built and
  // warm-up checked at). A request with other sizes runs on an engine specialised for them,
  // built on its first request and kept in a per-model LRU (server/serving/shape_engines.h).
  std::map<std::string, int64_t> dynamic_dims;
  // The sizes each such dim is served at, [min, max] inclusive (a request outside is
  // INVALID_ARGUMENT). Given as `dynamic_dims: {sequence: [1, 512]}` or `{sequence: {min: 1,
  // max: 512, typical: 64}}`; otherwise, and for a symbolic dim the config does not name,
  // taken from the model at load (server/model/dim_profiles.h).
  std::map<std::string, std::pair<int64_t, int64_t>> dynamic_dim_ranges;
  // The shape classes of a dim (`{min, max, classes: [1, 64]}`), ascending and ending at the
  // range's max, instead of the ladder server/model/padding.h makes: a decoder's new positions need
  // only one token (decoding) and a prefill chunk.
  std::map<std::string, std::vector<int64_t>> dynamic_dim_classes;
  // How many such specialised shapes a model keeps (each with the engines of the batch
  // buckets its requests used); the least recently used one is dropped beyond it.
  int max_shape_engines = 8;
  // auto: serve every size of the dynamic dims by zero-padding requests to a few shape
  // classes, when the model proves at load that padding does not move its outputs
  // (server/model/padding.h): engines for every class are built before READY and nothing is built
  // after. off: one engine set per exact shape, built on its first request (the LRU above).
  std::string shape_classes = "auto";
  // Inputs fixed at load (server/model/bound_inputs.h): input name -> its values (one fills
  // the whole input; true/false are 1/0). A bound input is a constant of the model, gone from
  // its signature. A merged decoder's `use_cache_branch` is bound to true unless named here
  // or generation is off.
  std::map<std::string, std::vector<double>> bind_inputs;
  // The generation loop of a decoder model (server/generate/).
  generate::GenerationConfig generation;
};

// Overrides the fields of `config` present in `node` (a YAML map). Unknown keys and bad
// values are INVALID_ARGUMENT naming the key, so a typo never silently keeps a default.
absl::Status ApplyModelConfig(const YAML::Node& node, ModelConfig& config);
// The same from YAML text (a model's config.yaml); `where` names it in errors.
absl::StatusOr<ModelConfig> ParseModelConfig(const std::string& yaml, const ModelConfig& base,
                                             const std::string& where);
// Checks ranges and fills the default buckets (powers of two up to max_batch_size).
absl::Status FinalizeModelConfig(ModelConfig& config);
// cpu_threads, or the cores (`cores`, 0: this machine's) divided among the instances.
int CpuThreadsPerInstance(const ModelConfig& config, unsigned cores = 0);
// The threads an engine is built with: every core with cpu_wide_runs, else
// CpuThreadsPerInstance.
int CpuBuildThreads(const ModelConfig& config, unsigned cores = 0);

}  // namespace kiln::server

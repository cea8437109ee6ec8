#include "server/model/model_config.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "runtime/device.h"
#include "server/common/yaml_read.h"

namespace kiln::server {
namespace {

absl::Status BadKey(const std::string& key, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("model config: '", key, "': ", why));
}

template <class T>
absl::Status Read(const YAML::Node& node, const std::string& key, T& out) {
  return ReadYaml(node, key, out, BadKey);
}

absl::Status ReadRange(const YAML::Node& node, const std::string& key, double& lo, double& hi) {
  std::vector<double> v;
  RETURN_IF_ERROR(Read(node, key, v));
  if (v.size() != 2 || !(v[0] <= v[1])) return BadKey(key, "expected [low, high], low <= high");
  lo = v[0];
  hi = v[1];
  return absl::OkStatus();
}

absl::Status ApplyWarmup(const YAML::Node& node, WarmupConfig& w) {
  if (!node.IsMap()) return BadKey("warmup", "expected a map");
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    const YAML::Node& v = kv.second;
    const std::string full = "warmup." + key;
    if (key == "enabled") {
      RETURN_IF_ERROR(Read(v, full, w.enabled));
    } else if (key == "seed") {
      RETURN_IF_ERROR(Read(v, full, w.seed));
    } else if (key == "rtol") {
      RETURN_IF_ERROR(Read(v, full, w.rtol));
    } else if (key == "atol") {
      RETURN_IF_ERROR(Read(v, full, w.atol));
    } else if (key == "float_range") {
      RETURN_IF_ERROR(ReadRange(v, full, w.float_lo, w.float_hi));
    } else if (key == "int_range") {
      double lo = 0, hi = 0;
      RETURN_IF_ERROR(ReadRange(v, full, lo, hi));
      // 2^53: every integer below is a double, and the cast below stays defined.
      constexpr double kExact = 9007199254740992.0;
      if (!(lo >= -kExact && hi <= kExact)) return BadKey(full, "values must be within +-2^53");
      w.int_lo = static_cast<int64_t>(lo);
      w.int_hi = static_cast<int64_t>(hi);
    } else if (key == "input_ranges") {
      if (!v.IsMap()) return BadKey(full, "expected a map of input name -> [low, high]");
      for (const auto& r : v) {
        auto& range = w.input_ranges[r.first.as<std::string>()];
        RETURN_IF_ERROR(
            ReadRange(r.second, full + "." + r.first.as<std::string>(), range.first, range.second));
      }
    } else {
      return BadKey(full, "unknown key");
    }
  }
  return absl::OkStatus();
}

absl::Status ApplyPrecision(const YAML::Node& node, PrecisionConfig& p) {
  if (!node.IsMap()) return BadKey("precision", "expected a map");
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    const YAML::Node& v = kv.second;
    const std::string full = "precision." + key;
    if (key == "mode") {
      RETURN_IF_ERROR(Read(v, full, p.mode));
      if (p.mode != "float32" && p.mode != "auto") return BadKey(full, "float32 or auto");
    } else if (key == "prefer") {
      RETURN_IF_ERROR(Read(v, full, p.prefer));
      if (p.prefer != "fastest" && p.prefer != "lowest") return BadKey(full, "fastest or lowest");
    } else if (key == "int8") {
      RETURN_IF_ERROR(Read(v, full, p.int8));
    } else if (key == "max_abs_error" || key == "max_rel_error") {
      double& out = key == "max_abs_error" ? p.max_abs_error : p.max_rel_error;
      RETURN_IF_ERROR(Read(v, full, out));
      if (!(out >= 0) || !std::isfinite(out)) return BadKey(full, "must be a finite number >= 0");
    } else {
      return BadKey(full, "unknown key");
    }
  }
  return absl::OkStatus();
}

// generation.tensors: {input_ids|attention_mask|position_ids|logits: NAME, cache: {PAST:
// PRESENT}}.
absl::Status ApplyTensorNames(const YAML::Node& node, generate::DecoderTensorNames& t) {
  if (!node.IsMap()) return BadKey("generation.tensors", "expected a map");
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    const std::string full = "generation.tensors." + key;
    if (key == "cache") {
      RETURN_IF_ERROR(Read(kv.second, full, t.cache));
      for (const auto& [past, present] : t.cache) {
        if (past.empty() || present.empty()) return BadKey(full, "names must not be empty");
      }
      continue;
    }
    std::string* role = key == "input_ids"        ? &t.input_ids
                        : key == "attention_mask" ? &t.attention_mask
                        : key == "position_ids"   ? &t.position_ids
                        : key == "logits"         ? &t.logits
                                                  : nullptr;
    if (!role) {
      return BadKey(full, "unknown key (input_ids, attention_mask, position_ids, logits, cache)");
    }
    RETURN_IF_ERROR(Read(kv.second, full, *role));
    if (role->empty()) return BadKey(full, "must name a tensor");
  }
  return absl::OkStatus();
}

absl::Status ApplyGeneration(const YAML::Node& node, generate::GenerationConfig& g) {
  if (!node.IsMap()) return BadKey("generation", "expected a map");
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    const YAML::Node& v = kv.second;
    const std::string full = "generation." + key;
    if (key == "mode") {
      RETURN_IF_ERROR(Read(v, full, g.mode));
    } else if (key == "max_sequences") {
      RETURN_IF_ERROR(Read(v, full, g.max_sequences));
    } else if (key == "kv_cache_bytes") {
      RETURN_IF_ERROR(Read(v, full, g.kv_cache_bytes));
    } else if (key == "page_tokens") {
      RETURN_IF_ERROR(Read(v, full, g.page_tokens));
    } else if (key == "prefill_chunk") {
      RETURN_IF_ERROR(Read(v, full, g.prefill_chunk));
    } else if (key == "prefill_budget") {
      RETURN_IF_ERROR(Read(v, full, g.prefill_budget));
    } else if (key == "max_new_tokens") {
      RETURN_IF_ERROR(Read(v, full, g.max_new_tokens));
    } else if (key == "keep_step_memory_ms") {
      RETURN_IF_ERROR(Read(v, full, g.keep_step_memory_ms));
    } else if (key == "eos_token_ids") {
      RETURN_IF_ERROR(Read(v, full, g.eos_token_ids));
    } else if (key == "kv_in_place") {
      RETURN_IF_ERROR(Read(v, full, g.kv_in_place));
    } else if (key == "prefix_cache") {
      RETURN_IF_ERROR(Read(v, full, g.prefix_cache));
    } else if (key == "prefill_logits") {
      RETURN_IF_ERROR(Read(v, full, g.prefill_logits));
    } else if (key == "cache_mask") {
      RETURN_IF_ERROR(Read(v, full, g.cache_mask));
    } else if (key == "tensors") {
      RETURN_IF_ERROR(ApplyTensorNames(v, g.tensors));
    } else {
      return BadKey(full, "unknown key");
    }
  }
  return absl::OkStatus();
}

// The generator's own check, worded as every model config error ("model config: 'key': why").
absl::Status CheckGeneration(const generate::GenerationConfig& g) {
  const absl::Status s = generate::ValidateGenerationConfig(g);
  if (s.ok()) return s;
  return absl::InvalidArgumentError(absl::StrCat("model config: ", s.message()));
}

absl::Status ApplyPipelineKey(const std::string& key, const YAML::Node& v, ModelConfig& c) {
  if (key == "opt_level") {
    std::string s;
    RETURN_IF_ERROR(Read(v, key, s));
    auto level = ParseOptLevel(s);
    if (!level.ok()) return BadKey(key, std::string(level.status().message()));
    c.opt_level = *level;
    return absl::OkStatus();
  }
  std::vector<std::string> names;
  RETURN_IF_ERROR(Read(v, key, names));
  const std::vector<std::string> known = AllPassNames();
  for (const std::string& n : names) {
    if (std::find(known.begin(), known.end(), n) == known.end()) {
      return BadKey(key, absl::StrCat("unknown pass '", n, "'"));
    }
  }
  c.disabled_passes = std::set<std::string>(names.begin(), names.end());
  return absl::OkStatus();
}

// input_shapes: {name: [d0, d1, ...]}, each dim -1 (keep the model's) or a size >= 1.
absl::Status ReadInputShapes(const YAML::Node& v, ModelConfig& c) {
  const std::string key = "input_shapes";
  if (!v.IsMap()) return BadKey(key, "expected a map of input name -> [dims] (-1 keeps a dim)");
  c.input_shapes.clear();
  for (const auto& kv : v) {
    const std::string name = kv.first.as<std::string>();
    std::vector<int64_t> dims;
    RETURN_IF_ERROR(Read(kv.second, key + "." + name, dims));
    for (int64_t d : dims) {
      if (d < 1 && d != -1) {
        return BadKey(key + "." + name, absl::StrCat(d, " is not a size (>= 1) or -1"));
      }
    }
    c.input_shapes[name] = std::move(dims);
  }
  return absl::OkStatus();
}

// bind_inputs: {name: value | [values]}, each a number or true/false.
absl::Status ReadBindInputs(const YAML::Node& v, ModelConfig& c) {
  const std::string key = "bind_inputs";
  if (!v.IsMap()) return BadKey(key, "expected a map of input name -> value or [values]");
  c.bind_inputs.clear();
  for (const auto& kv : v) {
    const std::string name = key + "." + kv.first.as<std::string>();
    std::vector<double>& out = c.bind_inputs[kv.first.as<std::string>()];
    const bool list = kv.second.IsSequence();
    if (!list && !kv.second.IsScalar()) return BadKey(name, "expected a value or [values]");
    for (const YAML::Node& e : list ? kv.second : YAML::Node(std::vector<YAML::Node>{kv.second})) {
      bool b = false;
      double d = 0;
      if (YAML::convert<bool>::decode(e, b)) {
        d = b ? 1.0 : 0.0;
      } else if (!e.IsScalar() || !YAML::convert<double>::decode(e, d) || !std::isfinite(d)) {
        return BadKey(name, "values are finite numbers or true/false");
      }
      out.push_back(d);
    }
    if (out.empty()) return BadKey(name, "needs at least one value");
  }
  return absl::OkStatus();
}

// One dynamic_dims entry: a warm-up size (`64`), a range (`[1, 512]`) or both (`{min: 1,
// max: 512, typical: 64}`, each key optional: min 1, max and typical from the model). A range
// may start at 0 (a decoder's cache is empty at its first step); sizes are >= 1.
absl::Status ReadDynamicDim(const std::string& key, const YAML::Node& v, ModelConfig& c) {
  const std::string name = key.substr(key.find('.') + 1);
  int64_t lo = -1, hi = 0, typical = 0;  // lo -1: not given
  if (v.IsScalar()) {
    RETURN_IF_ERROR(Read(v, key, typical));
  } else if (v.IsSequence()) {
    std::vector<int64_t> r;
    RETURN_IF_ERROR(Read(v, key, r));
    if (r.size() != 2) return BadKey(key, "expected [min, max]");
    lo = r[0];
    hi = r[1];
  } else if (v.IsMap()) {
    for (const auto& kv : v) {
      const std::string k = kv.first.as<std::string>();
      if (k == "classes") {
        std::vector<int64_t>& classes = c.dynamic_dim_classes[name];
        RETURN_IF_ERROR(Read(kv.second, key + ".classes", classes));
        for (size_t i = 0; i < classes.size(); ++i) {
          if (classes[i] < 1 || (i > 0 && classes[i] <= classes[i - 1])) {
            return BadKey(key + ".classes", "sizes must be >= 1 and strictly ascending");
          }
        }
        if (classes.empty()) return BadKey(key + ".classes", "needs at least one size");
        continue;
      }
      int64_t* out = k == "min" ? &lo : k == "max" ? &hi : k == "typical" ? &typical : nullptr;
      if (!out) return BadKey(key + "." + k, "unknown key (min, max, typical, classes)");
      RETURN_IF_ERROR(Read(kv.second, key + "." + k, *out));
      const int64_t least = out == &lo ? 0 : 1;  // a range may start empty
      if (*out < least) {
        return BadKey(key + "." + k, absl::StrCat(*out, " is not a size (>= ", least, ")"));
      }
    }
  } else {
    return BadKey(key, "expected a size, [min, max] or {min, max, typical}");
  }
  if (v.IsScalar() && typical < 1)
    return BadKey(key, absl::StrCat(typical, " is not a size (>= 1)"));
  if (v.IsSequence() && (lo < 0 || hi < lo || hi < 1))
    return BadKey(key, "expected [min, max], 0 <= min <= max, max >= 1");
  if (hi != 0 && lo > hi) return BadKey(key, absl::StrCat("min ", lo, " is above max ", hi));
  const int64_t min = lo < 0 ? 1 : lo;  // not given: 1
  if (typical != 0 && hi != 0 && (typical < min || typical > hi)) {
    return BadKey(key, absl::StrCat("typical ", typical, " is outside [", min, ", ", hi, "]"));
  }
  if (typical != 0) c.dynamic_dims[name] = typical;
  if (lo >= 0 || hi != 0) c.dynamic_dim_ranges[name] = {min, hi};  // hi 0: the model's
  return absl::OkStatus();
}

// dynamic_dims: {symbol: size | [min, max] | {min, max, typical}}.
absl::Status ReadDynamicDims(const YAML::Node& v, ModelConfig& c) {
  const std::string key = "dynamic_dims";
  if (!v.IsMap()) return BadKey(key, "expected a map of dim name -> warm-up size or range");
  c.dynamic_dims.clear();
  c.dynamic_dim_ranges.clear();
  c.dynamic_dim_classes.clear();
  for (const auto& kv : v) {
    RETURN_IF_ERROR(ReadDynamicDim(key + "." + kv.first.as<std::string>(), kv.second, c));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ApplyModelConfig(const YAML::Node& node, ModelConfig& c) {
  if (!node || node.IsNull()) return absl::OkStatus();
  if (!node.IsMap()) return absl::InvalidArgumentError("model config: expected a YAML map");
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    const YAML::Node& v = kv.second;
    if (key == "max_batch_size") {
      RETURN_IF_ERROR(Read(v, key, c.max_batch_size));
    } else if (key == "batch_buckets") {
      RETURN_IF_ERROR(Read(v, key, c.batch_buckets));
    } else if (key == "max_queue_delay_us") {
      RETURN_IF_ERROR(Read(v, key, c.max_queue_delay_us));
    } else if (key == "max_queue_size") {
      RETURN_IF_ERROR(Read(v, key, c.max_queue_size));
    } else if (key == "instances") {
      RETURN_IF_ERROR(Read(v, key, c.instances));
    } else if (key == "device") {
      RETURN_IF_ERROR(Read(v, key, c.device));
    } else if (key == "cpu_layout") {
      RETURN_IF_ERROR(Read(v, key, c.cpu_layout));
    } else if (key == "cpu_winograd") {
      RETURN_IF_ERROR(Read(v, key, c.cpu_winograd));
    } else if (key == "cpu_threads") {
      RETURN_IF_ERROR(Read(v, key, c.cpu_threads));
    } else if (key == "opt_level" || key == "disabled_passes") {
      RETURN_IF_ERROR(ApplyPipelineKey(key, v, c));
    } else if (key == "warmup") {
      RETURN_IF_ERROR(ApplyWarmup(v, c.warmup));
    } else if (key == "precision") {
      RETURN_IF_ERROR(ApplyPrecision(v, c.precision));
    } else if (key == "input_shapes") {
      RETURN_IF_ERROR(ReadInputShapes(v, c));
    } else if (key == "dynamic_dims") {
      RETURN_IF_ERROR(ReadDynamicDims(v, c));
    } else if (key == "bind_inputs") {
      RETURN_IF_ERROR(ReadBindInputs(v, c));
    } else if (key == "max_shape_engines") {
      RETURN_IF_ERROR(Read(v, key, c.max_shape_engines));
    } else if (key == "shape_classes") {
      RETURN_IF_ERROR(Read(v, key, c.shape_classes));
    } else if (key == "generation") {
      RETURN_IF_ERROR(ApplyGeneration(v, c.generation));
    } else {
      return BadKey(key, "unknown key");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelConfig> ParseModelConfig(const std::string& yaml, const ModelConfig& base,
                                             const std::string& where) {
  ModelConfig c = base;
  RETURN_IF_ERROR(ApplyYamlDocument(yaml, where, [&c](const YAML::Node& root) {
    RETURN_IF_ERROR(ApplyModelConfig(root, c));
    return FinalizeModelConfig(c);
  }));
  return c;
}

absl::Status FinalizeModelConfig(ModelConfig& c) {
  if (c.max_batch_size < 1 || c.max_batch_size > 4096) {
    return BadKey("max_batch_size", "must be in 1..4096");
  }
  if (c.max_queue_delay_us < 0) return BadKey("max_queue_delay_us", "must be >= 0");
  if (c.max_queue_size < 1) return BadKey("max_queue_size", "must be >= 1");
  if (c.instances < 1 || c.instances > 64) return BadKey("instances", "must be in 1..64");
  if (c.max_shape_engines < 1 || c.max_shape_engines > 1024) {
    return BadKey("max_shape_engines", "must be in 1..1024");
  }
  if (c.shape_classes != "auto" && c.shape_classes != "off") {
    return BadKey("shape_classes",
                  absl::StrCat("'", c.shape_classes, "' is not one of: auto, off"));
  }
  RETURN_IF_ERROR(CheckGeneration(c.generation));
  if (c.cpu_threads < 0 || c.cpu_threads > 1024) return BadKey("cpu_threads", "must be in 0..1024");
  if (c.cpu_layout != "tune" && c.cpu_layout != "primitive" && c.cpu_layout != "blocked") {
    return BadKey("cpu_layout",
                  absl::StrCat("'", c.cpu_layout, "' is not one of: tune, primitive, blocked"));
  }
  if (!runtime::ParseDevice(c.device)) {
    return BadKey("device", absl::StrCat("'", c.device, "' is not one of: reference, cpu, cuda:N"));
  }
  if (c.batch_buckets.empty()) {
    for (int64_t b = 1; b < c.max_batch_size; b *= 2) c.batch_buckets.push_back(b);
    c.batch_buckets.push_back(c.max_batch_size);
  }
  for (size_t i = 0; i < c.batch_buckets.size(); ++i) {
    if (c.batch_buckets[i] < 1 || (i > 0 && c.batch_buckets[i] <= c.batch_buckets[i - 1])) {
      return BadKey("batch_buckets", "must be positive and strictly ascending");
    }
  }
  if (c.batch_buckets.back() != c.max_batch_size) {
    return BadKey("batch_buckets", absl::StrCat("the last bucket must equal max_batch_size (",
                                                c.max_batch_size, ")"));
  }
  if (!(c.warmup.rtol >= 0) || !(c.warmup.atol >= 0)) {
    return BadKey("warmup", "rtol and atol must be >= 0");
  }
  return absl::OkStatus();
}

int CpuThreadsPerInstance(const ModelConfig& config, unsigned cores) {
  if (config.cpu_threads > 0) return config.cpu_threads;
  if (cores == 0) cores = std::max(1u, std::thread::hardware_concurrency());
  return std::max(1, static_cast<int>(cores) / std::max(1, config.instances));
}

int CpuBuildThreads(const ModelConfig& config, unsigned cores) {
  if (cores == 0) cores = std::max(1u, std::thread::hardware_concurrency());
  const int narrow = CpuThreadsPerInstance(config, cores);
  return config.cpu_wide_runs ? std::max(narrow, static_cast<int>(cores)) : narrow;
}

}  // namespace kiln::server

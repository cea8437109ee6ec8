#include "loadtest/options.h"

#include <functional>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace kiln::load {

const char kUsage[] = R"(kiln-load: load generator for kilnd (gRPC InferenceService)

usage: kiln-load [--target HOST:PORT] (--data FILE | --model NAME) [options]

  --target HOST:PORT   kilnd's gRPC address (default 127.0.0.1:8500)
  --data FILE          the request, a PredictRequest in JSON (the Tensor JSON form:
                       {"model":..,"inputs":{"x":{"dtype":"DATA_TYPE_FLOAT","shape":[1,8],
                       "float_data":[..]}}}); a BatchPredictRequest is accepted too
  --model NAME         random inputs of the model's declared dtypes/shapes (batch 1), read
                       with ModelService.GetModel; with --data, overrides the file's model
  --call predict|batch_predict|generate   (default predict); generate: streams of
                       kiln.v1.GenerationService/Generate (needs --model), reporting tokens/s,
                       time to first token and inter-token latency too
  --prompt-len N[,N..] generate: prompt lengths in tokens, cycled (default 32)
  --max-tokens N       generate: new tokens per request, EOS ignored (default 64)
  --protocol kiln|v2   kiln: kiln.v1 Predict (default); v2: the same requests as KServe v2
                       inference.GRPCInferenceService/ModelInfer (raw_input_contents)
  --samples N          batch_predict: samples per call (default 1)
  -c N                 closed loop: N calls in flight (default 1); open loop: in-flight cap
  -n N                 N requests (after warm-up)
  -z DURATION          run for DURATION (10s, 500ms, 2m) instead of -n
  --rps R              open loop: one request every 1/R s; latency counts from the scheduled
                       time, so a slow server cannot hide its queueing (coordinated omission)
  --warmup N           N requests first, not counted (default 0)
  --threads N          client threads, one CompletionQueue and connection each (default 1)
  --timeout DURATION   per-call deadline (default 20s)
  --wait-ready DURATION  poll GetModel until the model is READY (default: do not wait)
  --json FILE          write the report in ghz's JSON format (durations in nanoseconds)
)";

absl::StatusOr<std::chrono::nanoseconds> ParseDuration(const std::string& text) {
  static const std::pair<const char*, double> kUnits[] = {
      {"ns", 1}, {"us", 1e3}, {"ms", 1e6}, {"s", 1e9}, {"m", 60e9}, {"h", 3600e9}};
  // The two-letter units come first so "500ms" is not read as "500m" + "s".
  for (const auto& [suffix, scale] : kUnits) {
    const std::string s(suffix);
    if (text.size() > s.size() && text.compare(text.size() - s.size(), s.size(), s) == 0) {
      double v = 0;
      if (absl::SimpleAtod(text.substr(0, text.size() - s.size()), &v) && v >= 0) {
        return std::chrono::nanoseconds(static_cast<int64_t>(v * scale));
      }
      return absl::InvalidArgumentError(absl::StrCat("bad duration '", text, "'"));
    }
  }
  double v = 0;
  if (absl::SimpleAtod(text, &v) && v >= 0) {
    return std::chrono::nanoseconds(static_cast<int64_t>(v * 1e9));
  }
  return absl::InvalidArgumentError(absl::StrCat("bad duration '", text, "'"));
}

namespace {

template <typename T>
absl::Status ParseInt(const std::string& flag, const std::string& v, T min, T* out) {
  int64_t n = 0;
  if (!absl::SimpleAtoi(v, &n) || n < static_cast<int64_t>(min)) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": bad value '", v, "'"));
  }
  *out = static_cast<T>(n);
  return absl::OkStatus();
}

absl::Status ParseDurationFlag(const std::string& flag, const std::string& v,
                               std::chrono::nanoseconds* out) {
  auto d = ParseDuration(v);
  if (!d.ok()) return absl::InvalidArgumentError(absl::StrCat(flag, ": ", d.status().message()));
  *out = *d;
  return absl::OkStatus();
}

using Setter = std::function<absl::Status(const std::string& flag, const std::string& v, Options&)>;

// One entry per flag that takes a value.
const std::map<std::string, Setter>& Setters() {
  static const auto* setters = new std::map<std::string, Setter>{
      {"--target", [](auto&, auto& v, Options& o) { o.target = v; return absl::OkStatus(); }},
      {"--data", [](auto&, auto& v, Options& o) { o.data_file = v; return absl::OkStatus(); }},
      {"--model", [](auto&, auto& v, Options& o) { o.model = v; return absl::OkStatus(); }},
      {"--json", [](auto&, auto& v, Options& o) { o.json_file = v; return absl::OkStatus(); }},
      {"--call", [](auto& f, auto& v, Options& o) {
         if (v != "predict" && v != "batch_predict" && v != "generate") {
           return absl::InvalidArgumentError(absl::StrCat(f, ": predict, batch_predict or generate"));
         }
         o.call = v;
         return absl::OkStatus();
       }},
      {"--protocol", [](auto& f, auto& v, Options& o) {
         if (v != "kiln" && v != "v2") return absl::InvalidArgumentError(absl::StrCat(f, ": kiln or v2"));
         o.protocol = v;
         return absl::OkStatus();
       }},
      {"-c", [](auto& f, auto& v, Options& o) { return ParseInt(f, v, 1, &o.concurrency); }},
      {"--max-tokens", [](auto& f, auto& v, Options& o) { return ParseInt<int64_t>(f, v, 1, &o.max_tokens); }},
      {"--prompt-len", [](auto& f, auto& v, Options& o) {
         o.prompt_lens.clear();
         for (absl::string_view part : absl::StrSplit(v, ',')) {
           int64_t n = 0;
           if (absl::Status s = ParseInt<int64_t>(f, std::string(part), 1, &n); !s.ok()) return s;
           o.prompt_lens.push_back(n);
         }
         return absl::OkStatus();
       }},
      {"-n", [](auto& f, auto& v, Options& o) { return ParseInt<int64_t>(f, v, 1, &o.total); }},
      {"--warmup", [](auto& f, auto& v, Options& o) { return ParseInt<int64_t>(f, v, 0, &o.warmup); }},
      {"--threads", [](auto& f, auto& v, Options& o) { return ParseInt(f, v, 1, &o.threads); }},
      {"--samples", [](auto& f, auto& v, Options& o) { return ParseInt(f, v, 1, &o.samples); }},
      {"-z", [](auto& f, auto& v, Options& o) { return ParseDurationFlag(f, v, &o.duration); }},
      {"--rps", [](auto& f, auto& v, Options& o) {
         if (!absl::SimpleAtod(v, &o.rps) || o.rps <= 0) {
           return absl::InvalidArgumentError(absl::StrCat(f, ": bad value '", v, "'"));
         }
         return absl::OkStatus();
       }},
      {"--timeout", [](auto& f, auto& v, Options& o) {
         std::chrono::nanoseconds d{0};
         absl::Status s = ParseDurationFlag(f, v, &d);
         o.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(d);
         return s;
       }},
      {"--wait-ready", [](auto& f, auto& v, Options& o) {
         std::chrono::nanoseconds d{0};
         absl::Status s = ParseDurationFlag(f, v, &d);
         o.wait_ready = std::chrono::duration_cast<std::chrono::seconds>(d);
         return s;
       }},
  };
  return *setters;
}

}  // namespace

absl::StatusOr<Options> ParseOptions(const std::vector<std::string>& args) {
  Options o;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i], value;
    bool has_value = false;
    if (const size_t eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
      has_value = true;
    }
    auto it = Setters().find(flag);
    if (it == Setters().end()) return absl::InvalidArgumentError(absl::StrCat("unknown flag ", flag));
    if (!has_value) {
      if (i + 1 >= args.size()) return absl::InvalidArgumentError(absl::StrCat(flag, " needs a value"));
      value = args[++i];
    }
    if (absl::Status s = it->second(flag, value, o); !s.ok()) return s;
  }
  if (o.data_file.empty() && o.model.empty()) {
    return absl::InvalidArgumentError("give --data FILE or --model NAME");
  }
  if (o.total == 0 && o.duration.count() == 0) {
    return absl::InvalidArgumentError("give -n N or -z DURATION");
  }
  if (o.total > 0 && o.duration.count() > 0) return absl::InvalidArgumentError("-n and -z exclude each other");
  if (o.call == "generate" && (o.model.empty() || o.rps > 0 || o.protocol != "kiln")) {
    return absl::InvalidArgumentError("--call generate needs --model, a closed loop and --protocol kiln");
  }
  if (o.protocol == "v2" && o.call != "predict") {
    return absl::InvalidArgumentError("--protocol v2 sends ModelInfer: --call predict only");
  }
  return o;
}

}  // namespace kiln::load

// kiln bench: latency of one engine on random inputs. Compiles MODEL for --batch, builds the
// engine, warms up, times --runs runs and prints p50/p99 (also as JSON with --json).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_split.h"
#include "base/json.h"
#include "compiler/compile.h"
#include "compiler/onnx/importer.h"
#include "compiler/passes/inline_constant_if.h"
#include "compiler/shape/bind_values.h"
#include "compiler/shape/infer.h"
#include "compiler/shape/last_position.h"
#include "ops/interpreter.h"
#include "runtime/backend.h"
#include "runtime/check/calibrate.h"
#include "runtime/check/compare.h"
#include "runtime/check/differential.h"
#include "runtime/cpu/cpu_engine.h"
#include "tools/kiln/commands.h"
#include "tools/kiln/dim_flag.h"
#include "tools/kiln/static_graph.h"

namespace kiln::tools {
namespace {

struct BenchArgs {
  std::string model;
  std::string backend = "cpu";
  int64_t batch = 1;
  int threads = 0;
  int runs = 50;
  int warmup = 5;
  int gap_ms = 0;  // idle time before each timed run (--gap-ms): what a server between requests sees
  cpu::ActivationLayout layout = cpu::ActivationLayout::kTune;
  OptLevel opt = OptLevel::kO2;
  std::string json_path;
  shape::InputDims dims;
  std::map<std::string, std::vector<double>> binds;  // --bind: inputs fixed before compiling
  std::string last_position;  // --last-position: that output cut to its last position
  bool tf32 = false;  // cuda: TF32 tensor cores (--tf32)
  bool error = false;                 // --error: rel_err against the reference at float32 too
  std::vector<std::string> disabled;  // --disable PASS,...: passes left out (an A/B of one)
  // --precision bf16: the weight products in bfloat16; int8: quantized (quantize_int8.h)
  std::string precision = "float32";
  double int8_noise_kept = 1.0;  // --int8-noise F: int8-mixed's noise fraction (quantize_int8.h)
};

absl::StatusOr<int64_t> ParsePositive(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  long long n = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end || n <= 0) return absl::InvalidArgumentError("bad " + flag + " " + v);
  return n;
}

absl::StatusOr<BenchArgs> ParseBenchArgs(const std::vector<std::string>& args) {
  BenchArgs b;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--tf32" || a == "--error") {
      (a == "--tf32" ? b.tf32 : b.error) = true;
      continue;
    }
    if (a.rfind("--", 0) == 0 && a != "--backend" && a != "--json" && a != "--batch" &&
        a != "--threads" && a != "--runs" && a != "--warmup" && a != "--layout" && a != "--opt" &&
        a != "--dim" && a != "--gap-ms" && a != "--precision" && a != "--bind" &&
        a != "--last-position" && a != "--int8-noise" && a != "--disable") {
      return absl::InvalidArgumentError("unknown option " + a);
    }
    if (a.rfind("--", 0) != 0) {
      if (!b.model.empty()) return absl::InvalidArgumentError("unexpected argument " + a);
      b.model = a;
      continue;
    }
    if (i + 1 >= args.size()) return absl::InvalidArgumentError(a + " needs a value");
    const std::string& v = args[++i];
    if (a == "--backend") b.backend = v;
    if (a == "--precision") b.precision = v;
    if (a == "--json") b.json_path = v;
    if (a == "--batch") {
      ASSIGN_OR_RETURN(b.batch, ParsePositive(a, v));
    }
    if (a == "--threads") {
      ASSIGN_OR_RETURN(b.threads, ParsePositive(a, v));
    }
    if (a == "--runs") {
      ASSIGN_OR_RETURN(b.runs, ParsePositive(a, v));
    }
    if (a == "--gap-ms") {
      ASSIGN_OR_RETURN(b.gap_ms, ParsePositive(a, v));
    }
    if (a == "--opt") {
      ASSIGN_OR_RETURN(b.opt, ParseOptLevel(v));
    }
    if (a == "--dim") RETURN_IF_ERROR(AddDimFlag(v, b.dims));
    if (a == "--bind") RETURN_IF_ERROR(AddBindFlag(v, b.binds));
    if (a == "--last-position") b.last_position = v;
    if (a == "--disable") b.disabled = absl::StrSplit(v, ',', absl::SkipEmpty());
    if (a == "--int8-noise") {
      b.int8_noise_kept = std::strtod(v.c_str(), nullptr);
      if (!(b.int8_noise_kept > 0 && b.int8_noise_kept <= 1)) {
        return absl::InvalidArgumentError("--int8-noise: a fraction in (0, 1] (got " + v + ")");
      }
    }
    if (a == "--layout") {
      auto l = cpu::ParseActivationLayout(v);
      if (!l) return absl::InvalidArgumentError("--layout: primitive, blocked or tune (got " + v + ")");
      b.layout = *l;
    }
    if (a == "--warmup") {
      ASSIGN_OR_RETURN(b.warmup, ParsePositive(a, v));
    }
  }
  if (b.model.empty()) return absl::InvalidArgumentError("no MODEL given");
  if (b.precision != "float32" && !passes::IsInt8Precision(b.precision) &&
      !passes::IsLowerPrecision(b.precision)) {
    return absl::InvalidArgumentError(
        "--precision: float32, int8, int8-mixed, bf16 or bf16-mixed (got " + b.precision + ")");
  }
  RETURN_IF_ERROR(runtime::FindBackend(b.backend).status());
  return b;
}

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const size_t i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

absl::StatusOr<std::unique_ptr<runtime::Engine>> BuildBenchEngine(const BenchArgs& b,
                                                                   const CompiledGraph& compiled) {
  ASSIGN_OR_RETURN(const runtime::Backend* backend, runtime::FindBackend(b.backend));
  runtime::BuildOptions o;
  o.layout = cpu::ActivationLayoutName(b.layout);  // the CUDA engine measures its algorithms
  o.threads = b.threads;
  o.tune_threads = b.threads == 0;  // --threads T is taken as given
  o.dynamic_shapes = false;
  o.tf32 = b.tf32;
  return backend->Build(b.backend, compiled, o);
}

// The graph as the bench binds it, unoptimized (its O0 compile: names unchanged), which the
// reference runs.
absl::StatusOr<CompiledGraph> RawGraph(const Graph& graph, const CompileOptions& co) {
  CompileOptions plain = co;
  plain.pipeline.level = OptLevel::kO0;
  plain.pipeline.precision = "float32";
  return CompileGraph(graph, plain);
}

// A lowered precision's float reference: the feed the bench times and the raw graph's answer
// to it; int8 calibrates on that feed, and its run gives the answer (a bench figure, not a
// served model's calibration: kilnd calibrates on the warm-up rows).
struct LoweredReference {
  ref::TensorMap feed, expected;
  std::shared_ptr<const passes::Calibration> calibration;
};

absl::StatusOr<LoweredReference> ReferenceFor(const Graph& graph, const CompileOptions& co,
                                              bool int8) {
  ASSIGN_OR_RETURN(CompiledGraph raw, RawGraph(graph, co));
  LoweredReference r;
  ASSIGN_OR_RETURN(r.feed, check::RandomInputs(*raw.graph, {}));
  if (!int8) {
    ASSIGN_OR_RETURN(r.expected, ref::Run(*raw.graph, r.feed));
    return r;
  }
  std::vector<ref::TensorMap> answers;
  ASSIGN_OR_RETURN(r.calibration, check::Calibrate(*raw.graph, {&r.feed}, &answers));
  r.expected = std::move(answers[0]);
  return r;
}

// The largest relative error ||engine - reference|| / ||reference|| over the outputs (what the
// server's precision budget bounds).
double LoweredError(const runtime::Engine& engine, const ref::TensorMap& expected,
                    const std::vector<Tensor>& outs) {
  double worst = 0;
  for (size_t i = 0; i < outs.size(); ++i) {
    auto it = expected.find(engine.outputs()[i].name);
    if (it == expected.end()) continue;
    worst = std::max(worst, check::CompareTensors(outs[i], it->second, {}).norm_rel_err);
  }
  return worst;
}

absl::Status Bench(const BenchArgs& b) {
  ASSIGN_OR_RETURN(std::unique_ptr<Graph> graph, onnx_io::ImportModelFile(b.model));
  RETURN_IF_ERROR(shape::BindInputValues(*graph, b.binds));
  if (!b.last_position.empty()) {  // as a decoder's prefill engines run it (docs/generation.md)
    RETURN_IF_ERROR(shape::InferShapes(*graph));
    RETURN_IF_ERROR(passes::InlineConstantIf(*graph).status());
    ASSIGN_OR_RETURN(shape::LastPositionCut cut,
                     shape::CutToLastPosition(*graph, b.last_position, 1));
    std::printf("%s cut to its last position: %d ops (%d products)\n", b.last_position.c_str(),
                cut.nodes, cut.products);
  }
  CompileOptions co;
  co.batch = b.batch;
  co.dims = b.dims;
  co.pipeline.level = b.opt;
  co.pipeline.disabled = PassesOffHere(b.backend);
  co.pipeline.disabled.insert(b.disabled.begin(), b.disabled.end());
  co.pipeline.precision = b.precision;
  co.pipeline.int8_noise_kept = b.int8_noise_kept;
  std::optional<LoweredReference> reference;
  if (b.precision != "float32" || b.error) {
    ASSIGN_OR_RETURN(reference, ReferenceFor(*graph, co, passes::IsInt8Precision(b.precision)));
    co.pipeline.calibration = reference->calibration;
  }
  ASSIGN_OR_RETURN(CompiledGraph compiled, CompileGraph(*graph, co));
  ASSIGN_OR_RETURN(std::unique_ptr<runtime::Engine> engine, BuildBenchEngine(b, compiled));
  ref::TensorMap feeds;
  if (reference) {
    feeds = reference->feed;
  } else {
    ASSIGN_OR_RETURN(feeds, check::RandomInputs(*compiled.graph, {}));
  }
  std::vector<Tensor> ins, outs;
  for (const auto& spec : engine->inputs()) ins.push_back(feeds.at(spec.name));
  for (int i = 0; i < b.warmup; ++i) RETURN_IF_ERROR(engine->Run(ins, outs));
  std::vector<double> ms;
  ms.reserve(b.runs);  // the timed loop allocates nothing itself (bench/heap_allocs.sh)
  for (int i = 0; i < b.runs; ++i) {
    if (b.gap_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(b.gap_ms));
    auto t0 = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(engine->Run(ins, outs));
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  const auto& info = engine->info();
  json::Writer w(json::NonFinite::kNull);
  w.BeginObject();
  w.Field("model", b.model);
  w.Field("backend", b.backend);
  w.Field("device", info.device);
  w.Field("batch", b.batch);
  w.Field("p50_ms", Percentile(ms, 0.5));
  w.Field("p99_ms", Percentile(ms, 0.99));
  w.Field("runs", static_cast<int64_t>(b.runs));
  w.Field("build_ms", info.build_ms);
  w.Field("fallback_ops", static_cast<int64_t>(info.fallback_ops));
  std::string types;
  for (const auto& t : info.fallback_op_types) types += (types.empty() ? "" : ",") + t;
  w.Field("fallback_op_types", types);
  std::string slow;
  for (const auto& t : info.slow_ops) slow += (slow.empty() ? "" : ",") + t;
  w.Field("slow_ops", slow);
  w.Field("isa", info.isa);
  w.Field("layout_reorders", static_cast<int64_t>(info.layout_reorders));
  w.Field("arena_bytes", info.arena_bytes);
  w.Field("layout", info.layout);
  w.Field("tune_ms", info.tune_ms);
  w.Field("threads", static_cast<int64_t>(info.threads));
  // How OpenMP threads wait changes latency a lot on shared machines (base/openmp_env.h):
  // record it so numbers can be read.
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  const char* spin = std::getenv("GOMP_SPINCOUNT");
  w.Field("omp_wait_policy", policy ? policy : "default");
  w.Field("gomp_spincount", spin ? spin : "default");
  w.Field("weight_bytes", info.weight_bytes);
  w.Field("precision", b.precision);
  w.Field("bf16_ops", static_cast<int64_t>(info.bf16_ops));
  w.Field("winograd_ops", static_cast<int64_t>(info.winograd_ops));
  w.Field("free_transposes", static_cast<int64_t>(info.free_transposes));
  w.Field("activations_after", static_cast<int64_t>(info.activations_after));
  w.Field("trial_ms", info.trial_ms);
  w.Field("int8_ops", static_cast<int64_t>(info.int8_ops));
  if (reference) w.Field("rel_err", LoweredError(*engine, reference->expected, outs));
  std::printf("%s}\n", w.text().c_str());
  if (!b.json_path.empty()) {
    // The file also carries every timed run, for scripts that pool runs across processes.
    w.Key("times_ms");
    w.BeginArray();
    for (double t : ms) w.Double(t);
    w.EndArray();
    w.EndObject();
    std::ofstream(b.json_path) << w.text() << "\n";
  }
  return absl::OkStatus();
}

}  // namespace

int BenchCommand(const std::vector<std::string>& args) {
  absl::StatusOr<BenchArgs> b = ParseBenchArgs(args);
  absl::Status st = b.ok() ? Bench(*b) : b.status();
  if (!st.ok()) {
    std::fprintf(stderr, "kiln bench: %s\n", std::string(st.message()).c_str());
    return b.ok() ? 1 : 2;
  }
  return 0;
}

}  // namespace kiln::tools

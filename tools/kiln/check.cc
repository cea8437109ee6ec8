// kiln check: runs ONNX backend-test directories and reports pass / fail / unsupported / error.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "base/json.h"
#include "compiler/compile.h"
#include "compiler/onnx/importer.h"
#include "compiler/pipeline.h"
#include "compiler/shape/infer.h"
#include "runtime/backend.h"
#include "runtime/check/differential.h"
#include "runtime/cuda/cuda_engine.h"
#include "tools/kiln/commands.h"
#include "tools/kiln/engine_run.h"
#include "tools/kiln/model_io.h"

namespace kiln::tools {
namespace {

struct CheckOptions {
  std::string backend = "reference";
  double rtol = 1e-3;
  double atol = 1e-7;
  std::string json_path;
  bool quiet = false;
  std::optional<OptLevel> opt;  // run the optimized graph (--opt O2)
  bool bisect = false;          // replay the O2 pipeline pass by pass (--bisect)
  // Also run each data set with NaN/+-Inf/-0/denormals planted in its float inputs, the
  // optimized graph (or engine) against the reference on the raw graph (--nonfinite).
  bool nonfinite = false;
  // --backend cpu: the engines' activation layouts to check (--layout; default: both).
  std::vector<std::string> layouts = {"primitive", "blocked"};
  bool tf32 = false;  // --backend cuda: TF32 tensor cores (--tf32)
  std::vector<std::string> paths;
};

struct CheckResult {
  std::string test;
  std::string status;  // pass | fail | unsupported | error
  double max_abs_err = 0.0;
  double max_rel_err = 0.0;
  std::string message;
};

CheckResult FromStatus(const std::string& test, const absl::Status& st) {
  CheckResult r;
  r.test = test;
  r.status = absl::IsUnimplemented(st) ? "unsupported" : "error";
  r.message = std::string(st.message());
  return r;
}

// Compares one output, folding it into the running result.
void CompareOutput(const std::string& name, const Value* decl, const Tensor& got,
                   const Tensor& want, const CheckOptions& opt, CheckResult& r) {
  const check::Divergence c = check::CompareTensors(got, want, check::Tolerance{opt.rtol, opt.atol, {}});
  r.max_abs_err = std::max(r.max_abs_err, c.max_abs_err);
  r.max_rel_err = std::max(r.max_rel_err, c.max_rel_err);
  if (!c.ok && r.status == "pass") {
    r.status = "fail";
    r.message = "output '" + name + "': " + c.message;
  }
  // Shape inference must agree with what the kernel computed.
  if (r.status == "pass" && decl && decl->shape && IsStatic(*decl->shape) &&
      StaticDims(*decl->shape) != got.shape()) {
    r.status = "fail";
    r.message = "output '" + name + "': shape inference says " + ShapeToString(*decl->shape) +
                " but the kernel produced " + ShapeToString(got.shape());
  }
}

// Replays the pipeline pass by pass against the raw graph (shapes bound from the data set).
absl::Status BisectGraph(const Graph& graph, const ref::TensorMap& inputs,
                         const CheckOptions& opt, CheckResult& r) {
  PipelineOptions po;
  po.level = opt.opt.value_or(OptLevel::kO2);
  check::Tolerance tol{opt.rtol, opt.atol, {}};
  ASSIGN_OR_RETURN(check::BisectResult b, check::BisectPipeline(graph, po, inputs, tol));
  for (const auto& p : b.passes) {
    r.max_abs_err = std::max(r.max_abs_err, p.divergence.max_abs_err);
    r.max_rel_err = std::max(r.max_rel_err, p.divergence.max_rel_err);
  }
  if (!b.ok && r.status == "pass") {
    r.status = "fail";
    r.message = "first diverging pass: " + b.first_bad_pass + " (" +
                b.passes.back().divergence.message + ")";
  }
  return absl::OkStatus();
}

// Whether the check runs engines (any backend but the reference, which checks graphs).
bool OnEngine(const CheckOptions& opt) { return opt.backend != "reference"; }

// The engine backends: the CPU engine once per activation layout, the others once.
absl::StatusOr<EngineRun> RunOnBackend(const Graph& graph, const ref::TensorMap& feeds,
                                       const CheckOptions& opt) {
  EngineRunOptions o;
  o.device = opt.backend;
  o.level = opt.opt.value_or(OptLevel::kO2);
  o.layouts = opt.layouts;
  o.tf32 = opt.tf32;
  return RunOnEngine(graph, feeds, o);
}

// The data set's inputs with non-finite values planted: the raw graph on the reference is
// the expectation (a feed the reference refuses, an index computed from NaN say, is skipped:
// it says nothing about the optimizer), the optimized graph or the engine must agree.
absl::Status CheckNonFinite(const Graph& raw, const ref::TensorMap& feeds, const CheckOptions& opt,
                            CheckResult& r) {
  const ref::TensorMap hostile = check::WithNonFiniteValues(feeds, 1234);
  absl::StatusOr<ref::TensorMap> want = ref::Run(raw, hostile);
  if (!want.ok()) return absl::OkStatus();
  std::vector<std::pair<std::string, std::vector<Tensor>>> runs;
  if (OnEngine(opt)) {
    ASSIGN_OR_RETURN(EngineRun run, RunOnBackend(raw, hostile, opt));
    for (LayoutRun& lr : run.runs) runs.push_back({" [" + lr.layout + "]", std::move(lr.outputs)});
  } else {
    std::unique_ptr<Graph> g = raw.Clone();
    PipelineOptions po;
    po.level = opt.opt.value_or(OptLevel::kO2);
    RETURN_IF_ERROR(RunPipeline(*g, po).status());
    ASSIGN_OR_RETURN(ref::TensorMap got, ref::Run(*g, hostile));
    std::vector<Tensor> outs;
    for (const Value* v : raw.outputs) outs.push_back(got.at(v->name));
    runs.push_back({"", std::move(outs)});
  }
  for (const auto& [suffix, outs] : runs) {
    for (size_t k = 0; k < outs.size() && k < raw.outputs.size(); ++k) {
      const std::string& name = raw.outputs[k]->name;
      CompareOutput("(non-finite inputs) " + name + suffix, nullptr, outs[k], want->at(name), opt, r);
    }
  }
  return absl::OkStatus();
}

absl::Status RunDataSet(const std::string& model_path, const DataSet& ds,
                        const CheckOptions& opt, CheckResult& r) {
  ASSIGN_OR_RETURN(std::unique_ptr<Graph> graph, onnx_io::ImportModelFile(model_path));
  ASSIGN_OR_RETURN(ref::TensorMap feeds, BindInputs(*graph, ds));
  RETURN_IF_ERROR(BindShapes(*graph, feeds));
  if (opt.nonfinite) RETURN_IF_ERROR(CheckNonFinite(*graph, feeds, opt, r));
  if (OnEngine(opt)) {
    ASSIGN_OR_RETURN(EngineRun run, RunOnBackend(*graph, feeds, opt));
    for (const LayoutRun& lr : run.runs) {
      if (ds.outputs.size() != lr.outputs.size()) {
        return absl::InvalidArgumentError("test data has " + std::to_string(ds.outputs.size()) +
                                          " outputs, the engine " +
                                          std::to_string(lr.outputs.size()));
      }
      // Named by layout only when there were several engines, so messages stay as they were.
      const std::string suffix = run.runs.size() > 1 ? " [" + lr.layout + " layout]" : "";
      for (size_t k = 0; k < ds.outputs.size(); ++k) {
        const Value* decl = run.compiled.graph->outputs[k];
        CompareOutput(decl->name + suffix, decl, lr.outputs[k], ds.outputs[k], opt, r);
      }
    }
    return absl::OkStatus();
  }
  // The data set's inputs: conformance inputs are often indices, axes or scales that random
  // values would make invalid.
  if (opt.bisect) return BisectGraph(*graph, feeds, opt, r);
  if (opt.opt) {
    PipelineOptions po;
    po.level = *opt.opt;
    RETURN_IF_ERROR(RunPipeline(*graph, po).status());
  }
  ASSIGN_OR_RETURN(ref::TensorMap outs, ref::Run(*graph, feeds));
  if (ds.outputs.size() != graph->outputs.size()) {
    return absl::InvalidArgumentError("test data has " + std::to_string(ds.outputs.size()) +
                                      " outputs, the graph " +
                                      std::to_string(graph->outputs.size()));
  }
  for (size_t k = 0; k < ds.outputs.size(); ++k) {
    const Value* decl = graph->outputs[k];
    CompareOutput(decl->name, decl, outs.at(decl->name), ds.outputs[k], opt, r);
  }
  return absl::OkStatus();
}

// A model without data sets: with --opt or --bisect, the optimized graph is compared with the
// raw one at batch 1 on seeded random inputs (integer inputs within 0..10).
absl::Status CheckWithoutData(Graph& graph, const CheckOptions& opt, CheckResult& r) {
  if (!opt.opt && !opt.bisect) {
    r.message = "no test data sets (imported only)";
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(shape::Specialize(graph, 1));
  ASSIGN_OR_RETURN(ref::TensorMap inputs, check::RandomInputs(graph, check::InputRanges{}));
  return BisectGraph(graph, inputs, opt, r);
}

CheckResult RunTest(const TestCase& tc, const CheckOptions& opt) {
  const std::string& model = tc.model;
  // Import first: a model with sequence or optional inputs is reported as unsupported
  // before its (non-tensor) test data is read.
  absl::StatusOr<std::unique_ptr<Graph>> g = onnx_io::ImportModelFile(model);
  if (!g.ok()) return FromStatus(tc.name, g.status());
  absl::StatusOr<std::vector<DataSet>> sets =
      tc.dir.empty() ? std::vector<DataSet>{} : ReadDataSets(tc.dir);
  if (!sets.ok()) return FromStatus(tc.name, sets.status());
  CheckResult r;
  r.test = tc.name;
  r.status = "pass";
  if (sets->empty()) {
    absl::Status st = CheckWithoutData(**g, opt, r);
    if (!st.ok()) return FromStatus(tc.name, st);
  }
  for (const DataSet& ds : *sets) {
    absl::Status st = RunDataSet(model, ds, opt, r);
    if (!st.ok()) return FromStatus(tc.name, st);
  }
  return r;
}

absl::StatusOr<CheckOptions> ParseArgs(const std::vector<std::string>& args) {
  CheckOptions o;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto next = [&]() -> absl::StatusOr<std::string> {
      if (i + 1 >= args.size()) return absl::InvalidArgumentError(a + " needs a value");
      return args[++i];
    };
    if (a == "--backend") {
      ASSIGN_OR_RETURN(o.backend, next());
    } else if (a == "--rtol" || a == "--atol") {
      ASSIGN_OR_RETURN(std::string v, next());
      try {
        (a == "--rtol" ? o.rtol : o.atol) = std::stod(v);
      } catch (const std::exception&) {
        return absl::InvalidArgumentError(a + ": not a number: " + v);
      }
    } else if (a == "--json") {
      ASSIGN_OR_RETURN(o.json_path, next());
    } else if (a == "--opt" || a == "-O0" || a == "-O1" || a == "-O2") {
      std::string level = a;
      if (a == "--opt") {
        ASSIGN_OR_RETURN(level, next());
      }
      ASSIGN_OR_RETURN(o.opt, ParseOptLevel(level));
    } else if (a == "--layout") {
      ASSIGN_OR_RETURN(std::string v, next());
      if (v == "all") {
        o.layouts = {"primitive", "blocked"};
      } else if (v == "primitive" || v == "blocked") {
        o.layouts = {v};
      } else {
        return absl::InvalidArgumentError("--layout: primitive, blocked or all (got '" + v + "')");
      }
    } else if (a == "--tf32") {
      o.tf32 = true;
    } else if (a == "--bisect") {
      o.bisect = true;
    } else if (a == "--nonfinite") {
      o.nonfinite = true;
    } else if (a == "-q" || a == "--quiet") {
      o.quiet = true;
    } else if (!a.empty() && a[0] == '-') {
      return absl::InvalidArgumentError("unknown option " + a);
    } else {
      o.paths.push_back(a);
    }
  }
  RETURN_IF_ERROR(runtime::FindBackend(o.backend).status());
  if (o.paths.empty()) return absl::InvalidArgumentError("no test PATH given");
  return o;
}

// Rewritten after every test (to a temporary file, then renamed), so a run killed at a time
// limit still leaves every result it had. `stopped`: why the run ended early ("" if not).
void WriteJson(const std::string& path, const std::vector<CheckResult>& results,
               const std::map<std::string, int>& counts, size_t total, const std::string& stopped) {
  json::Writer w(json::NonFinite::kNull);
  w.BeginObject();
  w.Field("stopped", stopped);
  w.Field("tests", static_cast<int64_t>(total));
  w.Field("not_run", static_cast<int64_t>(total - results.size()));
  w.Key("results");
  w.BeginArray();
  for (const auto& r : results) {
    w.BeginObject();
    w.Field("test", r.test);
    w.Field("status", r.status);
    w.Field("max_abs_err", r.max_abs_err);
    w.Field("max_rel_err", r.max_rel_err);
    w.Field("message", r.message);
    w.EndObject();
  }
  w.EndArray();
  w.Key("summary");
  w.BeginObject();
  for (const char* k : {"pass", "fail", "unsupported", "error"}) {
    w.Field(k, static_cast<int64_t>(counts.count(k) ? counts.at(k) : 0));
  }
  w.EndObject();
  w.EndObject();
  const std::string tmp = path + ".tmp";
  { std::ofstream(tmp) << w.text() << "\n"; }
  std::rename(tmp.c_str(), path.c_str());
}

}  // namespace

int CheckCommand(const std::vector<std::string>& args) {
  absl::StatusOr<CheckOptions> opt = ParseArgs(args);
  if (!opt.ok()) {
    std::fprintf(stderr, "kiln check: %s\n", std::string(opt.status().message()).c_str());
    return 2;
  }
  std::vector<TestCase> cases;
  for (const auto& p : opt->paths) {
    auto found = FindTestCases(p);
    if (found.empty()) std::fprintf(stderr, "kiln check: no tests under %s\n", p.c_str());
    cases.insert(cases.end(), found.begin(), found.end());
  }
  std::vector<CheckResult> results;
  std::map<std::string, int> counts;
  std::string stopped;
  for (const auto& tc : cases) {
    auto t0 = std::chrono::steady_clock::now();
    CheckResult r = RunTest(tc, *opt);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                    .count();
    ++counts[r.status];
    if (!opt->quiet || r.status != "pass") {
      std::printf("%-12s %-60s abs=%.3g rel=%.3g %.0fms %s\n", r.status.c_str(), r.test.c_str(),
                  r.max_abs_err, r.max_rel_err, ms, r.message.c_str());
      std::fflush(stdout);
    }
    // A sticky CUDA error (an illegal address...) loses this process's context: every later
    // test would fail with it, so the run stops here and says so.
    const bool sticky = r.status == "error" && cuda::IsStickyCudaError(r.message);
    if (sticky) stopped = "sticky CUDA error in " + r.test + ": " + r.message;
    results.push_back(std::move(r));
    if (!opt->json_path.empty()) WriteJson(opt->json_path, results, counts, cases.size(), stopped);
    if (sticky) {
      std::printf("stopped: %s (%zu tests not run)\n", stopped.c_str(), cases.size() - results.size());
      break;
    }
  }
  std::printf("summary: %d pass, %d fail, %d unsupported, %d error (%zu tests)\n", counts["pass"],
              counts["fail"], counts["unsupported"], counts["error"], cases.size());
  if (!opt->json_path.empty()) WriteJson(opt->json_path, results, counts, cases.size(), stopped);
  return (counts["fail"] + counts["error"]) > 0 ? 1 : 0;
}

}  // namespace kiln::tools

// kiln run: runs a model on inputs given as TensorProto files; writes output_K.pb files (the
// backend-test layout, so a run's folder can become a test data set).
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "compiler/onnx/importer.h"
#include "compiler/onnx/tensor_proto.h"
#include "runtime/backend.h"
#include "tools/kiln/commands.h"
#include "tools/kiln/engine_run.h"
#include "tools/kiln/model_io.h"

namespace kiln::tools {
namespace {

struct RunOptions {
  std::string model;
  std::vector<std::pair<std::string, std::string>> inputs;  // name -> file
  std::string output_dir;
  std::string backend = "reference";  // reference | cpu | cuda (engines run the O2 graph)
  bool tf32 = false;
};

absl::StatusOr<RunOptions> ParseRunArgs(const std::vector<std::string>& args) {
  RunOptions o;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if ((a == "--input" || a == "--output-dir" || a == "--backend") && i + 1 >= args.size()) {
      return absl::InvalidArgumentError(a + " needs a value");
    }
    if (a == "--input") {
      const std::string& spec = args[++i];
      size_t eq = spec.find('=');
      if (eq == std::string::npos || eq == 0) {
        return absl::InvalidArgumentError("--input wants NAME=FILE.pb, got '" + spec + "'");
      }
      o.inputs.emplace_back(spec.substr(0, eq), spec.substr(eq + 1));
    } else if (a == "--output-dir") {
      o.output_dir = args[++i];
    } else if (a == "--backend") {
      o.backend = args[++i];
    } else if (a == "--tf32") {
      o.tf32 = true;
    } else if (!a.empty() && a[0] == '-') {
      return absl::InvalidArgumentError("unknown option " + a);
    } else if (o.model.empty()) {
      o.model = a;
    } else {
      return absl::InvalidArgumentError("unexpected argument " + a);
    }
  }
  if (o.model.empty()) return absl::InvalidArgumentError("no MODEL given");
  if (o.output_dir.empty()) return absl::InvalidArgumentError("--output-dir is required");
  RETURN_IF_ERROR(runtime::FindBackend(o.backend).status());
  return o;
}

// The graph's outputs by name: the reference on the graph as imported, or an engine on the
// O2 graph compiled for the inputs' shapes.
absl::StatusOr<ref::TensorMap> RunOn(const RunOptions& o, const Graph& graph, const ref::TensorMap& feeds) {
  if (o.backend == "reference") return ref::Run(graph, feeds);
  EngineRunOptions eo;
  eo.device = o.backend;
  eo.tf32 = o.tf32;
  ASSIGN_OR_RETURN(EngineRun run, RunOnEngine(graph, feeds, eo));
  ref::TensorMap outs;
  for (size_t k = 0; k < graph.outputs.size() && k < run.runs[0].outputs.size(); ++k) {
    outs[graph.outputs[k]->name] = run.runs[0].outputs[k];
  }
  return outs;
}

absl::Status Run(const RunOptions& o) {
  ASSIGN_OR_RETURN(std::unique_ptr<Graph> graph, onnx_io::ImportModelFile(o.model));
  ref::TensorMap feeds;
  for (const auto& [name, file] : o.inputs) {
    ASSIGN_OR_RETURN(Tensor t, onnx_io::ReadTensorFile(file));
    feeds[name] = std::move(t);
  }
  RETURN_IF_ERROR(BindShapes(*graph, feeds));
  ASSIGN_OR_RETURN(ref::TensorMap outs, RunOn(o, *graph, feeds));
  std::filesystem::create_directories(o.output_dir);
  for (size_t k = 0; k < graph->outputs.size(); ++k) {
    const std::string& name = graph->outputs[k]->name;
    const Tensor& t = outs.at(name);
    std::string path = o.output_dir + "/output_" + std::to_string(k) + ".pb";
    RETURN_IF_ERROR(onnx_io::WriteTensorFile(t, name, path));
    std::printf("%s: %s %s -> %s\n", name.c_str(), DTypeName(t.dtype()).c_str(),
                ShapeToString(t.shape()).c_str(), path.c_str());
  }
  return absl::OkStatus();
}

}  // namespace

int RunCommand(const std::vector<std::string>& args) {
  absl::StatusOr<RunOptions> o = ParseRunArgs(args);
  if (!o.ok()) {
    std::fprintf(stderr, "kiln run: %s\n", std::string(o.status().message()).c_str());
    return 2;
  }
  absl::Status st = Run(*o);
  if (!st.ok()) {
    std::fprintf(stderr, "kiln run: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace kiln::tools

// kiln compile: import, specialize to a batch size, optimize, plan memory; prints the compile
// report and optionally writes it as JSON and the optimized graph as ONNX.
#include "compiler/compile.h"

#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "compiler/onnx/exporter.h"
#include "compiler/onnx/importer.h"
#include "compiler/shape/bind_values.h"
#include "tools/kiln/commands.h"
#include "tools/kiln/dim_flag.h"

namespace kiln::tools {
namespace {

struct CompileArgs {
  std::string model;
  CompileOptions options;
  std::map<std::string, std::vector<double>> binds;  // --bind: inputs fixed before compiling
  bool report = false;
  std::string json_path;
  std::string output;
};

std::set<std::string> SplitComma(const std::string& s) {
  std::set<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.insert(item);
  }
  return out;
}

absl::StatusOr<CompileArgs> ParseCompileArgs(const std::vector<std::string>& args) {
  CompileArgs c;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto next = [&]() -> absl::StatusOr<std::string> {
      if (i + 1 >= args.size()) return absl::InvalidArgumentError(a + " needs a value");
      return args[++i];
    };
    if (a == "--batch") {
      ASSIGN_OR_RETURN(std::string v, next());
      char* end = nullptr;
      c.options.batch = std::strtoll(v.c_str(), &end, 10);
      if (*end || c.options.batch <= 0) return absl::InvalidArgumentError("bad --batch " + v);
    } else if (a == "--dim") {
      ASSIGN_OR_RETURN(std::string v, next());
      RETURN_IF_ERROR(AddDimFlag(v, c.options.dims));
    } else if (a == "--bind") {
      ASSIGN_OR_RETURN(std::string v, next());
      RETURN_IF_ERROR(AddBindFlag(v, c.binds));
    } else if (a == "-O0" || a == "-O1" || a == "-O2") {
      ASSIGN_OR_RETURN(c.options.pipeline.level, ParseOptLevel(a));
    } else if (a == "--disable") {
      ASSIGN_OR_RETURN(std::string v, next());
      c.options.pipeline.disabled = SplitComma(v);
    } else if (a == "--report") {
      c.report = true;
    } else if (a == "--json") {
      ASSIGN_OR_RETURN(c.json_path, next());
    } else if (a == "-o") {
      ASSIGN_OR_RETURN(c.output, next());
    } else if (!a.empty() && a[0] == '-') {
      return absl::InvalidArgumentError("unknown option " + a);
    } else if (c.model.empty()) {
      c.model = a;
    } else {
      return absl::InvalidArgumentError("unexpected argument " + a);
    }
  }
  if (c.model.empty()) return absl::InvalidArgumentError("no MODEL given");
  return c;
}

absl::Status Compile(const CompileArgs& c) {
  ASSIGN_OR_RETURN(std::unique_ptr<Graph> graph, onnx_io::ImportModelFile(c.model));
  RETURN_IF_ERROR(shape::BindInputValues(*graph, c.binds));
  ASSIGN_OR_RETURN(CompiledGraph compiled, CompileGraph(*graph, c.options));
  const CompileReport& r = compiled.report;
  if (c.report) {
    std::printf("%s", r.ToText().c_str());
  } else {
    std::printf("%s: %zu -> %zu ops, arena %lld bytes, %.1f ms\n", c.model.c_str(),
                r.ops_before, r.ops_after, static_cast<long long>(r.arena_bytes), r.compile_ms);
  }
  if (!c.json_path.empty()) {
    std::ofstream f(c.json_path);
    f << r.ToJson() << "\n";
    if (!f) return absl::InternalError("cannot write " + c.json_path);
  }
  if (!c.output.empty()) RETURN_IF_ERROR(onnx_io::ExportModelFile(*compiled.graph, c.output));
  return absl::OkStatus();
}

}  // namespace

int CompileCommand(const std::vector<std::string>& args) {
  absl::StatusOr<CompileArgs> c = ParseCompileArgs(args);
  if (!c.ok()) {
    std::fprintf(stderr, "kiln compile: %s\n", std::string(c.status().message()).c_str());
    return 2;
  }
  absl::Status st = Compile(*c);
  if (!st.ok()) {
    std::fprintf(stderr, "kiln compile: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace kiln::tools

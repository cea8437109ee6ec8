#include "tests/cuda/kernel_corpus.h"

#include <cstdlib>
#include <filesystem>

#include "compiler/onnx/importer.h"
#include "tools/kiln/model_io.h"
#include "tools/kiln/static_graph.h"

namespace kiln::testing {
namespace {

absl::StatusOr<CorpusGraph> Load(const tools::TestCase& tc) {
  ASSIGN_OR_RETURN(std::unique_ptr<Graph> g, onnx_io::ImportModelFile(tc.model));
  ASSIGN_OR_RETURN(std::vector<tools::DataSet> sets, tools::ReadDataSets(tc.dir));
  if (sets.empty()) return absl::NotFoundError("no data set");
  ASSIGN_OR_RETURN(ref::TensorMap feeds, tools::BindInputs(*g, sets[0]));
  RETURN_IF_ERROR(tools::BindShapes(*g, feeds));
  ASSIGN_OR_RETURN(CompiledGraph c, tools::CompileStatic(*g, feeds, OptLevel::kO2, "cuda"));
  // An engine serves static shapes only; `kiln check` reports the rest as unsupported.
  for (const auto& n : c.graph->nodes()) {
    for (const Value* v : n->outputs) {
      if (v && (!v->shape || !IsStatic(*v->shape))) return absl::UnimplementedError("data-dependent shape");
    }
  }
  // Frozen inputs became constants: feed only what is still an input.
  ref::TensorMap kept;
  for (const Value* v : c.graph->inputs) {
    if (feeds.count(v->name)) kept[v->name] = feeds.at(v->name);
  }
  return CorpusGraph{tc.name, std::shared_ptr<const Graph>(std::move(c.graph)), std::move(kept)};
}

}  // namespace

std::string ConformanceDir() {
  const char* env = std::getenv("KILN_ONNX_TESTS_DIR");
  const std::string base = env && *env ? env : KILN_DEFAULT_ONNX_TESTS_DIR;
  if (base.empty()) return "";
  const std::string dir = base + "/node";
  return std::filesystem::is_directory(dir) ? dir : "";
}

std::string ModelsDir() {
  const char* cache = std::getenv("KILN_CACHE_DIR");
  const char* home = std::getenv("HOME");
  const std::string base = cache && *cache ? cache : (home ? std::string(home) + "/.cache/kiln" : "");
  const std::string dir = base + "/models";
  return !base.empty() && std::filesystem::is_directory(dir) ? dir : "";
}

std::vector<CorpusGraph> LoadCorpus(const std::string& dir, CorpusStats& stats, bool models,
                                    size_t limit) {
  std::vector<CorpusGraph> out;
  if (dir.empty()) return out;
  std::vector<tools::TestCase> cases = tools::FindTestCases(dir);
  if (limit > 0 && cases.size() > limit) cases.resize(limit);
  (models ? stats.models : stats.node_tests) += static_cast<int>(cases.size());
  for (const tools::TestCase& tc : cases) {
    absl::StatusOr<CorpusGraph> g = Load(tc);
    if (!g.ok()) {
      ++stats.skipped;
      continue;
    }
    out.push_back(std::move(*g));
  }
  return out;
}

}  // namespace kiln::testing

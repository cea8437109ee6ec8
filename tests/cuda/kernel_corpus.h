// Test support: the graphs whose generated kernels the CUDA tests check — every ONNX node
// conformance test ($KILN_ONNX_TESTS_DIR/node, data set 0) and the real models of
// tests/models/export_models.py (${KILN_CACHE_DIR:-~/.cache/kiln}/models), each compiled at O2
// for its data set's static shapes, as `kiln check --backend cuda` compiles them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ops/interpreter.h"

namespace kiln::testing {

struct CorpusGraph {
  std::string name;
  std::shared_ptr<const Graph> graph;
  ref::TensorMap feeds;
};

struct CorpusStats {
  int node_tests = 0;  // conformance test folders found
  int models = 0;      // real models found
  int skipped = 0;     // not importable or not compilable with static shapes
};

// $KILN_ONNX_TESTS_DIR/node (default: the build's KILN_ONNX_TESTS_DIR); "" when absent.
std::string ConformanceDir();
std::string ModelsDir();       // "" when no model was exported
// Every test folder or model below `dir` (sorted), compiled; `limit` caps how many are read
// (0: all).
std::vector<CorpusGraph> LoadCorpus(const std::string& dir, CorpusStats& stats, bool models,
                                    size_t limit = 0);

}  // namespace kiln::testing

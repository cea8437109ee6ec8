// Test support: checks generated kernels node by node against the reference interpreter.
// A graph runs on the reference; every node a generator takes is recorded with its input
// tensors and the reference's outputs; the recorded kernels are compiled for the host in
// large modules (one compiler run per few hundred kernels) and each node's kernels are run
// on the same inputs and compared.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "compiler/codegen/cuda_kernel.h"
#include "ir/graph.h"
#include "ops/interpreter.h"
#include "runtime/check/compare.h"

namespace kiln::testing {

struct RecordedNode {
  std::string where;              // "test: Node 'name' (opset N)"
  std::shared_ptr<const Graph> graph;  // keeps `node` alive
  const Node* node = nullptr;
  std::vector<codegen::Kernel> kernels;
  std::vector<Tensor> inputs;  // by node input index; undefined where omitted
  std::vector<Tensor> want;    // the reference's outputs
};

struct RecordStats {
  int nodes = 0;        // nodes run on the reference
  int generated = 0;    // nodes with generated kernels
  int kernels = 0;
  int unsupported = 0;  // nodes a generator took but refused (UNIMPLEMENTED)
  std::vector<std::string> errors;  // generator errors other than UNIMPLEMENTED
};

// Runs `graph` (static shapes) on the reference with `feeds` and records the nodes that get
// kernels. Kernel names are prefixed with `tag` (unique per graph in one module).
absl::Status RecordGraph(std::shared_ptr<const Graph> graph, const ref::TensorMap& feeds,
                         const std::string& tag, std::vector<RecordedNode>& out, RecordStats& stats);

struct HostCheck {
  int checked = 0;
  std::vector<std::string> failures;
};

// Compiles the recorded kernels for the host and compares every node with the reference.
absl::StatusOr<HostCheck> CheckOnHost(const std::vector<RecordedNode>& nodes,
                                      const check::Tolerance& tol, size_t kernels_per_module = 400);

}  // namespace kiln::testing

// The reference interpreter: the oracle. Runs a graph node by node with the straightforward
// kernels of the registry. Every backend and every optimization is judged against it.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "ir/graph.h"
#include "ops/constant_results.h"
#include "ops/kernel.h"

namespace kiln::ref {

using TensorMap = std::map<std::string, Tensor>;

// Runs one node: finds its kernel (UNIMPLEMENTED naming op, node and opset if none) and checks
// the kernel returned one tensor per output.
absl::StatusOr<std::vector<Tensor>> RunNode(const Node& node, const KernelInputs& inputs);

// Feeds `inputs` (by graph input name; every graph input required, dtypes must match, shapes
// must match the declared known dims) and returns every graph output by name. Intermediates
// are released after their last use.
absl::StatusOr<TensorMap> Run(const Graph& graph, const TensorMap& inputs);
// The same, taking the results of nodes over large constants from `constants` and keeping
// the ones it computes there (ops/constant_results.h): those that read at least
// kMinConstantBytes and whose outputs are no larger than their inputs (the cache holds no
// more than the model's own weights per such node). Null: as Run above.
absl::StatusOr<TensorMap> Run(const Graph& graph, const TensorMap& inputs,
                              ConstantResults* constants);

// Runs a control-flow body: `args` bind its inputs in order, `captured` its captures by
// name (Graph::captures); returns its outputs in order.
absl::StatusOr<std::vector<Tensor>> RunBody(const Graph& body, const std::vector<Tensor>& args,
                                            const TensorMap& captured);

// UNIMPLEMENTED naming the first node, in `graph` or any body nested in it, that has no
// kernel: a branch a request may never take is refused at load, not when it is taken.
absl::Status CheckSupported(const Graph& graph);

// Checks a fed tensor against a graph input declaration.
absl::Status CheckInput(const Value& input, const Tensor& t);

}  // namespace kiln::ref

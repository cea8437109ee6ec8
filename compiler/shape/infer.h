// Shape and type inference. Each operator has a rule (rules_*.cc) that computes output
// dtypes and shapes (with symbolic dims) from its inputs. On top of the rules, constant
// propagation: a node whose inputs are all constant and small is evaluated with the reference
// kernel, so shape-computing subgraphs (Shape -> Gather -> Unsqueeze -> Concat -> Reshape)
// resolve to constants once Specialize has bound the batch dim.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "ir/graph.h"

namespace kiln::shape {

class InferContext {
 public:
  InferContext(Graph& graph, Node& node) : graph_(graph), node_(node) {}

  const Node& node() const { return node_; }
  Graph& graph() { return graph_; }
  size_t num_inputs() const { return node_.inputs.size(); }
  size_t num_outputs() const { return node_.outputs.size(); }
  bool has_input(size_t i) const { return node_.input(i) != nullptr; }
  bool has_output(size_t i) const { return node_.output(i) != nullptr; }
  DType input_dtype(size_t i) const;
  // nullopt when the input is absent or its rank is unknown.
  std::optional<Shape> input_shape(size_t i) const;
  // input_shape(i); when that is unknown, output 0 is set to input i's dtype with an unknown
  // shape (all a shape-preserving rule can say) before nullopt is returned.
  std::optional<Shape> input_shape_or_unknown_output(size_t i);
  // The input's value when it is a constant, else nullptr.
  const Tensor* input_constant(size_t i) const;
  // Sets output i (ignored when that output is omitted). shape nullopt = unknown rank.
  void set_output(size_t i, DType dtype, std::optional<Shape> shape);
  // Sets output i to a known value (e.g. Shape of a static input); a node whose outputs are
  // all known is removed and its outputs become constants.
  void set_output_constant(size_t i, Tensor value);

  // Errors that name the node.
  absl::Status Invalid(const std::string& what) const;
  absl::Status Unsupported(const std::string& what) const;

 private:
  Graph& graph_;
  Node& node_;
};

using InferFn = std::function<absl::Status(InferContext&)>;

class RuleRegistry {
 public:
  void Register(const std::string& domain, const std::string& op_type, InferFn fn);
  const InferFn* Find(const std::string& domain, const std::string& op_type) const;
  static const RuleRegistry& Default();

 private:
  std::map<std::pair<std::string, std::string>, InferFn> rules_;
};

void RegisterElementwiseRules(RuleRegistry& r);
void RegisterNnRules(RuleRegistry& r);
void RegisterReductionRules(RuleRegistry& r);
void RegisterTensorRules(RuleRegistry& r);
void RegisterKilnRules(RuleRegistry& r);
void RegisterControlFlowRules(RuleRegistry& r);

struct InferOptions {
  // Constant-propagate nodes whose inputs are all constant when the result is at most this
  // many elements (shape arithmetic is tiny; folding weights is the optimizer's job).
  int64_t max_fold_elements = 4096;
  // Unknown operators leave their outputs untyped instead of failing.
  bool allow_unknown_ops = true;
};

// Infers every node in order; nodes whose outputs become known constants are removed
// (their outputs turn into constant values). Fails on inputs that contradict a rule (INVALID_ARGUMENT) and
// on rule failures; declared dtypes that disagree with inferred ones are errors too.
absl::Status InferShapes(Graph& graph, const InferOptions& options = {});

// Binds symbolic dims of the graph inputs: `batch` replaces dim 0 where it is symbolic or
// unknown; every other symbolic dim named in `bindings` takes its value. Then re-infers, so
// shape subgraphs fold to constants.
absl::Status Specialize(Graph& graph, int64_t batch,
                        const std::map<std::string, int64_t>& bindings = {});

}  // namespace kiln::shape

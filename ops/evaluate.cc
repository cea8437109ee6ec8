#include "ops/evaluate.h"

#include <set>
#include <string>

#include "ops/interpreter.h"

namespace kiln::ref {

bool IsDeterministic(const Node& node) {
  static const std::set<std::string> kRandom = {"RandomNormal",     "RandomUniform",
                                                "RandomNormalLike", "RandomUniformLike",
                                                "Multinomial",      "Bernoulli"};
  if (!node.domain.empty()) return true;
  if (kRandom.count(node.op_type)) return false;
  if (node.op_type == "Dropout") {
    const Value* training = node.input(2);
    return !training || (training->constant && training->constant->GetInt(0) == 0);
  }
  return true;
}

absl::StatusOr<std::vector<Tensor>> EvaluateConstantNode(const Node& node) {
  KernelInputs inputs;
  for (const Value* in : node.inputs) {
    if (in && !in->constant) {
      return absl::FailedPreconditionError("input '" + in->name + "' of node '" + node.name +
                                           "' is not constant");
    }
    inputs.push_back(in ? &*in->constant : nullptr);
  }
  if (!IsDeterministic(node)) {
    return absl::FailedPreconditionError(node.op_type + " node '" + node.name +
                                         "' is not deterministic");
  }
  return RunNode(node, inputs);
}

}  // namespace kiln::ref

#include "ir/kiln_ops.h"

#include <set>

namespace kiln::kiln_ops {

bool IsEpilogueActivation(const std::string& op) {
  static const std::set<std::string> kActs = {"Relu",        "LeakyRelu", "Clip", "Sigmoid",
                                              "HardSigmoid", "HardSwish", "Tanh", "Gelu",
                                              "GeluTanh",    "SiLU"};
  return kActs.count(op) > 0;
}

std::vector<EpilogueStep> ReadEpilogue(const Node& node) {
  std::vector<EpilogueStep> steps;
  const Attribute* ops = node.FindAttr("epilogue");
  if (!ops) return steps;
  std::vector<float> alpha = node.GetFloats("epilogue_alpha");
  std::vector<float> beta = node.GetFloats("epilogue_beta");
  for (size_t i = 0; i < ops->strings.size(); ++i) {
    EpilogueStep s;
    s.op = ops->strings[i];
    s.alpha = i < alpha.size() ? alpha[i] : 0.0f;
    s.beta = i < beta.size() ? beta[i] : 0.0f;
    steps.push_back(s);
  }
  return steps;
}

void WriteEpilogue(Node& node, const std::vector<EpilogueStep>& steps) {
  std::vector<std::string> ops;
  std::vector<float> alpha, beta;
  for (const auto& s : steps) {
    ops.push_back(s.op);
    alpha.push_back(s.alpha);
    beta.push_back(s.beta);
  }
  node.attrs["epilogue"] = Attribute::Strings(ops);
  node.attrs["epilogue_alpha"] = Attribute::Floats(alpha);
  node.attrs["epilogue_beta"] = Attribute::Floats(beta);
}

size_t ResidualCount(const std::vector<EpilogueStep>& steps) {
  size_t n = 0;
  for (const auto& s : steps) n += s.op == "Add";
  return n;
}

bool IsEpilogueAttribute(const std::string& name) {
  return name == "epilogue" || name == "epilogue_alpha" || name == "epilogue_beta";
}

absl::StatusOr<Program> ReadProgram(const Node& node) {
  Program p;
  const Attribute* ops = node.FindAttr("ops");
  if (!ops || ops->kind != Attribute::Kind::kStrings || ops->strings.empty()) {
    return absl::InvalidArgumentError(node.Describe() + ": FusedElementwise needs 'ops'");
  }
  std::vector<int64_t> arity = node.GetInts("arity");
  std::vector<int64_t> operands = node.GetInts("operands");
  if (arity.size() != ops->strings.size()) {
    return absl::InvalidArgumentError(node.Describe() + ": 'arity' does not match 'ops'");
  }
  const int64_t n_inputs = ProgramOperands(node);
  if (n_inputs < 1 || ConcatInputs(node) == 1) {
    return absl::InvalidArgumentError(node.Describe() + ": bad 'concat_inputs'");
  }
  size_t pos = 0;
  for (size_t i = 0; i < ops->strings.size(); ++i) {
    Instruction ins;
    ins.op = ops->strings[i];
    for (int64_t k = 0; k < arity[i]; ++k, ++pos) {
      // Operands may name inputs or earlier instructions only: the program is straight-line.
      if (pos >= operands.size() || operands[pos] < 0 ||
          operands[pos] >= n_inputs + static_cast<int64_t>(i)) {
        return absl::InvalidArgumentError(node.Describe() + ": bad operand in instruction " +
                                          std::to_string(i));
      }
      ins.operands.push_back(operands[pos]);
    }
    // The names with this prefix are adjacent in the sorted attribute map: a range lookup,
    // not a walk over every instruction's attributes per instruction.
    const std::string prefix = "i" + std::to_string(i) + ".";
    for (auto it = node.attrs.lower_bound(prefix);
         it != node.attrs.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
      ins.attrs[it->first.substr(prefix.size())] = it->second;
    }
    p.instructions.push_back(std::move(ins));
  }
  p.dtype = static_cast<DType>(node.GetInt("dtype", 0));
  return p;
}

int64_t ConcatInputs(const Node& node) { return node.GetInt(kConcatInputs, 0); }

int64_t ProgramOperands(const Node& node) {
  const int64_t k = ConcatInputs(node), n = static_cast<int64_t>(node.inputs.size());
  return k >= 2 && k <= n ? n - k + 1 : k == 0 ? n : -1;
}

void WriteProgram(Node& node, const Program& program) {
  std::vector<std::string> ops;
  std::vector<int64_t> arity, operands;
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    const Instruction& ins = program.instructions[i];
    ops.push_back(ins.op);
    arity.push_back(static_cast<int64_t>(ins.operands.size()));
    operands.insert(operands.end(), ins.operands.begin(), ins.operands.end());
    for (const auto& [name, a] : ins.attrs) node.attrs["i" + std::to_string(i) + "." + name] = a;
  }
  node.attrs["ops"] = Attribute::Strings(ops);
  node.attrs["arity"] = Attribute::Ints(arity);
  node.attrs["operands"] = Attribute::Ints(operands);
  node.attrs["dtype"] = Attribute::Int(static_cast<int64_t>(program.dtype));
}

}  // namespace kiln::kiln_ops

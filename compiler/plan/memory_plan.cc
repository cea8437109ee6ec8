#include "compiler/plan/memory_plan.h"

#include <algorithm>
#include <set>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ir/kiln_ops.h"

namespace kiln::plan {
namespace {

// Bytes of a planned value; the planner needs every size fixed at compile time.
absl::StatusOr<int64_t> ValueBytes(const Value& v) {
  const size_t elem = DTypeSize(v.dtype);
  if (elem == 0) {
    return absl::InvalidArgumentError(absl::StrCat("memory plan: value '", v.name, "' has dtype ",
                                                   DTypeName(v.dtype), " with no dense size"));
  }
  if (!v.shape || !IsStatic(*v.shape)) {
    return absl::InvalidArgumentError(
        absl::StrCat("memory plan: value '", v.name, "' has non-static shape ",
                     v.shape ? ShapeToString(*v.shape) : "(unknown rank)"));
  }
  int64_t bytes = static_cast<int64_t>(elem);
  for (int64_t d : StaticDims(*v.shape)) {
    if (__builtin_mul_overflow(bytes, d, &bytes) || bytes > (int64_t{1} << 60)) {
      return absl::InvalidArgumentError(
          absl::StrCat("memory plan: value '", v.name, "' is too large"));
    }
  }
  return bytes;
}

// A set of values sharing one arena buffer: its owner and the views/in-place results of it.
struct Group {
  std::string owner;
  int64_t size = 0;   // the owner's bytes; aliases never exceed it
  int64_t first = 0;  // the owner's step
  int64_t last = 0;   // the last step any member is used (or defined, if never used)
};

class Planner {
 public:
  Planner(const Graph& g, const PlanOptions& o) : graph_(g), options_(o) {}
  absl::StatusOr<MemoryPlan> Run();

 private:
  absl::Status ComputeSteps();
  absl::Status PlanOutput(const Node& node, size_t out_index, int64_t step);
  // The group `v` belongs to, or -1 when its memory is external (input, constant, output).
  int GroupOf(const Value* v) const;
  int InPlaceCandidate(const Node& node, const Value& out, int64_t step) const;
  int64_t LastUse(const Value* v, int64_t step) const;
  ValuePlan& Record(const Value& v, int64_t bytes, int64_t step);
  absl::StatusOr<MemoryPlan> Assign();

  const Graph& graph_;
  const PlanOptions& options_;
  std::unordered_map<const Value*, int64_t> def_step_;
  std::unordered_map<const Value*, int64_t> last_use_;
  std::unordered_set<const Value*> graph_outputs_;
  std::unordered_map<const Value*, int> group_of_;               // planned values
  std::unordered_map<const Value*, std::string> external_root_;  // views of external memory
  std::vector<Group> groups_;
  MemoryPlan plan_;
};

// Producer steps and last-use steps, and a check that every input is defined before use
// (a lifetime that ends before it begins would silently corrupt the plan).
absl::Status Planner::ComputeSteps() {
  for (const Value* v : graph_.outputs) graph_outputs_.insert(v);
  const auto& nodes = graph_.nodes();
  for (size_t s = 0; s < nodes.size(); ++s) {
    const Node& n = *nodes[s];
    for (const Value* in : n.inputs) {
      if (!in) continue;
      if (in->producer && !def_step_.count(in)) {
        return absl::InvalidArgumentError(absl::StrCat("memory plan: ", n.Describe(), " reads '",
                                                       in->name, "' before it is produced"));
      }
      last_use_[in] = static_cast<int64_t>(s);
    }
    for (const Value* out : n.outputs) {
      if (out) def_step_[out] = static_cast<int64_t>(s);
    }
  }
  return absl::OkStatus();
}

int64_t Planner::LastUse(const Value* v, int64_t step) const {
  auto it = last_use_.find(v);
  return it == last_use_.end() ? step : std::max(step, it->second);
}

int Planner::GroupOf(const Value* v) const {
  auto it = group_of_.find(v);
  return it == group_of_.end() ? -1 : it->second;
}

ValuePlan& Planner::Record(const Value& v, int64_t bytes, int64_t step) {
  plan_.index[v.name] = plan_.values.size();
  ValuePlan& p = plan_.values.emplace_back();
  p.name = v.name;
  p.size_bytes = bytes;
  p.step = step;
  p.root = v.name;
  return p;
}

// An input whose buffer `out` may overwrite, or -1. Safe only when the input dies here
// (every value sharing its buffer has its last use at this step) and the kernel reads element
// i of it exactly where it writes element i of `out`: same dtype and element count. Another
// input reading the same buffer with a different size could be read after being overwritten.
int Planner::InPlaceCandidate(const Node& node, const Value& out, int64_t step) const {
  if (!options_.in_place || !IsInPlaceElementwise(node) || &out != node.output(0)) return -1;
  const int64_t out_bytes = *ValueBytes(out);
  for (size_t k = 0; k < node.inputs.size(); ++k) {
    const Value* in = node.inputs[k];
    const int g = GroupOf(in);
    if (g < 0 || groups_[g].last > step || in->dtype != out.dtype) continue;
    absl::StatusOr<int64_t> in_bytes = ValueBytes(*in);
    if (!in_bytes.ok() || *in_bytes != out_bytes) continue;
    const bool clash = std::any_of(node.inputs.begin(), node.inputs.end(), [&](const Value* other) {
      return other && GroupOf(other) == g && *ValueBytes(*other) != out_bytes;
    });
    if (!clash) return static_cast<int>(k);
  }
  return -1;
}

absl::Status Planner::PlanOutput(const Node& node, size_t out_index, int64_t step) {
  const Value& out = *node.outputs[out_index];
  ASSIGN_OR_RETURN(int64_t bytes, ValueBytes(out));
  const int64_t last = LastUse(&out, step);
  const Value* src = nullptr;
  AliasKind kind = AliasKind::kNone;
  if (out_index == 0 && IsViewOp(node) && node.input(0)) {
    src = node.input(0);
    kind = AliasKind::kView;
  } else if (int k = InPlaceCandidate(node, out, step); k >= 0) {
    src = node.inputs[k];
    kind = AliasKind::kInPlace;
  }
  ValuePlan& p = Record(out, bytes, step);
  if (kind == AliasKind::kNone) {
    p.buffer = static_cast<int>(groups_.size());
    group_of_[&out] = p.buffer;
    groups_.push_back({out.name, bytes, step, last});
    return absl::OkStatus();
  }
  p.alias = kind;
  p.alias_of = src->name;
  const int g = GroupOf(src);
  if (g < 0) {  // a view of memory the engine binds: no arena space
    p.external = true;
    auto root = external_root_.find(src);
    p.root = root != external_root_.end() ? root->second : src->name;
    external_root_[&out] = p.root;
    return absl::OkStatus();
  }
  if (bytes > groups_[g].size) {
    return absl::InvalidArgumentError(absl::StrCat("memory plan: ", node.Describe(), " views '",
                                                   src->name, "' but its output '", out.name,
                                                   "' is larger"));
  }
  p.root = groups_[g].owner;
  p.buffer = g;
  group_of_[&out] = g;
  groups_[g].last = std::max(groups_[g].last, last);
  return absl::OkStatus();
}

// Turns the groups into buffer requests, places them, and gives every value its offset.
absl::StatusOr<MemoryPlan> Planner::Assign() {
  plan_.alignment = options_.alignment;
  for (const Group& g : groups_) {
    plan_.buffers.push_back({g.size, g.first, g.last});
    plan_.buffer_owner.push_back(g.owner);
  }
  AssignOptions ao;
  ao.alignment = options_.alignment;
  ao.search_orderings = options_.search_orderings;
  ASSIGN_OR_RETURN(plan_.assignment, AssignBuffers(plan_.buffers, ao));
  for (ValuePlan& p : plan_.values) {
    if (p.external) continue;
    p.offset = plan_.assignment.offsets[p.buffer];
    plan_.naive_bytes += AlignUp(p.size_bytes, options_.alignment);
  }
  plan_.arena_bytes = plan_.assignment.arena_bytes;
  plan_.lower_bound_bytes = plan_.assignment.lower_bound_bytes;
  return std::move(plan_);
}

absl::StatusOr<MemoryPlan> Planner::Run() {
  if (options_.alignment < 1)
    return absl::InvalidArgumentError("memory plan: alignment must be >= 1");
  RETURN_IF_ERROR(ComputeSteps());
  const auto& nodes = graph_.nodes();
  for (size_t s = 0; s < nodes.size(); ++s) {
    const Node& n = *nodes[s];
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      const Value* out = n.outputs[i];
      if (!out || out->is_constant() || graph_outputs_.count(out)) continue;
      RETURN_IF_ERROR(PlanOutput(n, i, static_cast<int64_t>(s)));
    }
  }
  return Assign();
}

const char* AliasLabel(const ValuePlan& p) {
  if (p.external) return "external view of ";
  switch (p.alias) {
    case AliasKind::kNone:
      return "";
    case AliasKind::kView:
      return "view of ";
    case AliasKind::kInPlace:
      return "in place of ";
  }
  return "";
}

}  // namespace

bool IsViewOp(const Node& node) {
  static const std::set<std::string> kViews = {"Reshape", "Flatten", "Squeeze", "Unsqueeze",
                                               "Identity"};
  if (node.GetInt("kiln_view", 0) == 1) return true;
  return node.domain == kOnnxDomain && kViews.count(node.op_type) > 0;
}

bool IsInPlaceElementwise(const Node& node) {
  // Ops whose output element i depends only on element i of each (same-shaped) input, so an
  // input can be overwritten as the kernel walks it. Comparisons are left out: they change
  // the dtype, which the byte-size check would reject anyway.
  static const std::set<std::string> kOnnx = {"Abs",
                                              "Neg",
                                              "Exp",
                                              "Log",
                                              "Sqrt",
                                              "Reciprocal",
                                              "Floor",
                                              "Ceil",
                                              "Round",
                                              "Sign",
                                              "Erf",
                                              "Sin",
                                              "Cos",
                                              "Tan",
                                              "Asin",
                                              "Acos",
                                              "Atan",
                                              "Sinh",
                                              "Cosh",
                                              "Asinh",
                                              "Acosh",
                                              "Atanh",
                                              "Relu",
                                              "LeakyRelu",
                                              "PRelu",
                                              "Elu",
                                              "Selu",
                                              "Celu",
                                              "Gelu",
                                              "Sigmoid",
                                              "HardSigmoid",
                                              "HardSwish",
                                              "Tanh",
                                              "Softplus",
                                              "Softsign",
                                              "Mish",
                                              "ThresholdedRelu",
                                              "Not",
                                              "Add",
                                              "Sub",
                                              "Mul",
                                              "Div",
                                              "Pow",
                                              "Max",
                                              "Min",
                                              "Mod",
                                              "Sum",
                                              "Mean",
                                              "And",
                                              "Or",
                                              "Xor",
                                              "BitwiseAnd",
                                              "BitwiseOr",
                                              "BitwiseXor",
                                              "BitwiseNot",
                                              "Where",
                                              "Clip"};
  // A program over concatenated inputs reads each piece at its own offsets, not the output's.
  if (node.domain == kKilnDomain) {
    return node.op_type == kiln_ops::kFusedElementwise && kiln_ops::ConcatInputs(node) == 0;
  }
  return node.domain == kOnnxDomain && kOnnx.count(node.op_type) > 0;
}

const ValuePlan* MemoryPlan::Find(std::string_view name) const {
  auto it = index.find(std::string(name));
  return it == index.end() ? nullptr : &values[it->second];
}

std::string MemoryPlan::Describe() const {
  const double ratio =
      lower_bound_bytes > 0 ? static_cast<double>(arena_bytes) / lower_bound_bytes : 1.0;
  std::string s = absl::StrFormat(
      "memory plan: arena %d bytes, naive %d, lower bound %d (arena/bound %.3f), %d buffers for %d "
      "values, "
      "alignment %d, strategy %s\n",
      arena_bytes, naive_bytes, lower_bound_bytes, ratio, buffers.size(), values.size(), alignment,
      assignment.strategy.empty() ? "-" : assignment.strategy);
  for (const ValuePlan& p : values) {
    const std::string where = p.external ? "-" : absl::StrCat(p.offset);
    absl::StrAppendFormat(&s, "  step %4d  offset %10s  %10d bytes  %s", p.step, where,
                          p.size_bytes, p.name);
    if (p.alias != AliasKind::kNone) absl::StrAppend(&s, " (", AliasLabel(p), p.alias_of, ")");
    absl::StrAppend(&s, "\n");
  }
  return s;
}

absl::StatusOr<MemoryPlan> PlanMemory(const Graph& graph, const PlanOptions& options) {
  Planner planner(graph, options);
  return planner.Run();
}

absl::Status ValidatePlan(const MemoryPlan& plan) {
  RETURN_IF_ERROR(ValidatePlan(plan.assignment, plan.buffers));
  for (const ValuePlan& p : plan.values) {
    if (p.external) {
      if (p.offset != -1 || p.buffer != -1)
        return absl::InternalError("external view '" + p.name + "' has an offset");
      continue;
    }
    const bool fits = p.buffer >= 0 && static_cast<size_t>(p.buffer) < plan.buffers.size() &&
                      p.offset == plan.assignment.offsets[p.buffer] &&
                      p.size_bytes <= plan.buffers[p.buffer].size_bytes &&
                      p.step >= plan.buffers[p.buffer].first_step &&
                      p.step <= plan.buffers[p.buffer].last_step;
    const ValuePlan* root = plan.Find(p.root);
    if (!fits || !root || root->offset != p.offset) {
      return absl::InternalError("value '" + p.name + "' does not sit inside its buffer");
    }
  }
  return absl::OkStatus();
}

}  // namespace kiln::plan

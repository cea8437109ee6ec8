#include "runtime/check/input_hints.h"

#include <algorithm>
#include <deque>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"

namespace kiln::check {
namespace {

constexpr int64_t kOnnxBool = 9;  // TensorProto.BOOL, Cast's `to`

// Ops whose output holds (some of) the values of input 0 unchanged: an id or a mask keeps
// its meaning through them.
bool PassesValues(const Node& n, size_t k) {
  static const std::set<std::string> kOps = {"Unsqueeze", "Squeeze",  "Reshape",   "Flatten",
                                             "Expand",    "Identity", "Transpose", "Slice",
                                             "Tile",      "Gather",   "Cast"};
  return n.domain.empty() && k == 0 && kOps.count(n.op_type) > 0;
}

bool AllOnes(const Value* v) {
  if (!v || !v->is_constant() || v->constant->numel() == 0) return false;
  for (int64_t i = 0; i < v->constant->numel(); ++i) {
    if (v->constant->GetDouble(i) != 1.0) return false;
  }
  return true;
}

// A scalar constant 0 or 1: what a mask is compared with (mask == 0).
bool ZeroOrOne(const Value* v) {
  if (!v || !v->is_constant() || v->constant->numel() != 1) return false;
  const double x = v->constant->GetDouble(0);
  return x == 0.0 || x == 1.0;
}

// A mask use of input k of `n`, described; "" when it is none.
std::string MaskUse(const Node& n, size_t k) {
  if (!n.domain.empty()) return "";
  if (n.op_type == "Cast" && n.GetInt("to", 0) == kOnnxBool) return "mask (Cast to bool)";
  if (n.op_type == "Where" && k == 0) return "mask (Where's condition)";
  if (n.op_type == "Sub" && k == 1 && AllOnes(n.input(0))) return "mask (Sub(1, x))";
  if (n.op_type == "Not" || n.op_type == "And" || n.op_type == "Or" || n.op_type == "Xor") {
    return "mask (" + n.op_type + ")";
  }
  return "";
}

// The size of the table Gather `n` indexes on its axis; -1 when unknown.
int64_t TableRows(const Node& n) {
  const Value* data = n.input(0);
  if (!data || !data->shape) return -1;
  const int64_t rank = static_cast<int64_t>(data->shape->size());
  int64_t axis = n.GetInt("axis", 0);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) return -1;
  const Dim& d = (*data->shape)[axis];
  return d.known() && d.value > 0 ? d.value : -1;
}

// Narrows `hint` by one use (the intersection: an input that indexes two tables stays in
// the smaller; a mask that also indexes stays {0, 1}).
void Narrow(std::optional<InputHint>& hint, const InputHint& use) {
  if (!hint) {
    hint = use;
    return;
  }
  const double lo = std::max(hint->lo, use.lo), hi = std::min(hint->hi, use.hi);
  if (lo > hi) return;  // contradictory uses: keep the first
  if (use.hi < hint->hi || use.binary) hint->why = use.why;
  hint->lo = lo;
  hint->hi = hi;
  hint->binary = hint->binary || use.binary;
}

std::optional<InputHint> HintFor(const Graph& graph, const Value* input) {
  std::optional<InputHint> hint;
  bool compared = false;  // with a scalar 0 or 1
  std::deque<const Value*> todo = {input};
  std::set<const Value*> seen = {input};
  while (!todo.empty()) {
    const Value* v = todo.front();
    todo.pop_front();
    for (const Node* n : graph.Consumers(v)) {
      for (size_t k = 0; k < n->inputs.size(); ++k) {
        if (n->inputs[k] != v) continue;
        if (std::string mask = MaskUse(*n, k); !mask.empty()) {
          Narrow(hint, InputHint{0, 1, true, mask});
          continue;
        }
        // mask == 0 is a mask only when nothing else says more: token ids compared with
        // the padding id 0 (a mask built from the ids) still index their table.
        if (n->domain.empty() && n->op_type == "Equal" && k < 2 && ZeroOrOne(n->input(1 - k))) {
          compared = true;
          continue;
        }
        if (n->domain.empty() && n->op_type == "Gather" && k == 1) {
          const int64_t rows = TableRows(*n);
          if (rows > 0) {
            Narrow(hint,
                   InputHint{0, static_cast<double>(rows - 1), false,
                             absl::StrCat("indexes '", n->input(0)->name, "' (", rows, " rows)")});
          }
          continue;
        }
        if (!PassesValues(*n, k)) continue;
        const Value* out = n->output(0);
        if (out && seen.insert(out).second) todo.push_back(out);
      }
    }
  }
  if (!hint && compared) hint = InputHint{0, 1, true, "mask (Equal(x, 0|1))"};
  return hint;
}

}  // namespace

std::map<std::string, InputHint> InferInputHints(const Graph& graph) {
  std::map<std::string, InputHint> hints;
  for (const Value* in : graph.inputs) {
    if (std::optional<InputHint> h = HintFor(graph, in)) hints[in->name] = *h;
  }
  return hints;
}

}  // namespace kiln::check

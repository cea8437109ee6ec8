// Einsum, general form: explicit or implicit output, repeated labels within an operand
// (diagonals), ellipsis with broadcasting, any number of operands. One loop runs over every
// label: output labels outside, summed labels inside; repeated labels simply add their
// strides, which walks the diagonal.
#include <algorithm>
#include <map>
#include <string>

#include "ops/kernel_util.h"
#include "ops/nn_einsum.h"
#include "ops/nn_ops.h"

namespace kiln::ref::nn {
namespace {

constexpr int kEllipsisMarker = -1;

// Letters become their ASCII codes, "..." becomes kEllipsisMarker.
absl::StatusOr<std::vector<int>> ParseTerm(const Node& node, const std::string& term) {
  std::vector<int> labels;
  bool seen_ellipsis = false;
  for (size_t i = 0; i < term.size(); ++i) {
    const char ch = term[i];
    if (ch == '.') {
      if (seen_ellipsis || term.compare(i, 3, "...") != 0) {
        return InvalidInput(node, "bad ellipsis in einsum term '" + term + "'");
      }
      seen_ellipsis = true;
      labels.push_back(kEllipsisMarker);
      i += 2;
    } else if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z')) {
      labels.push_back(ch);
    } else {
      return InvalidInput(node, std::string("bad character '") + ch + "' in einsum equation");
    }
  }
  return labels;
}

// Replaces the ellipsis marker by `count` ellipsis labels aligned to the right of `total`.
std::vector<int> ExpandEllipsis(const std::vector<int>& term, int64_t count, int64_t total) {
  std::vector<int> out;
  for (int l : term) {
    if (l != kEllipsisMarker) {
      out.push_back(l);
      continue;
    }
    for (int64_t j = 0; j < count; ++j) out.push_back(kEllipsisLabel + int(total - count + j));
  }
  return out;
}

std::vector<int> ImplicitOutput(const std::vector<std::vector<int>>& terms, int64_t ell) {
  std::map<int, int> uses;
  for (const auto& t : terms) {
    for (int l : t) ++uses[l];
  }
  std::vector<int> out;
  for (int64_t j = 0; j < ell; ++j) out.push_back(kEllipsisLabel + int(j));
  for (const auto& [l, n] : uses) {  // std::map iterates in ASCII order
    if (n == 1 && l < kEllipsisLabel) out.push_back(l);
  }
  return out;
}

absl::Status CheckOutput(const Node& node, const EinsumLabels& e) {
  for (size_t i = 0; i < e.output.size(); ++i) {
    const int l = e.output[i];
    if (std::count(e.output.begin(), e.output.end(), l) > 1) {
      return InvalidInput(node, "einsum output repeats a label");
    }
    bool found = false;
    for (const auto& t : e.inputs) found = found || std::count(t.begin(), t.end(), l) > 0;
    if (!found) return InvalidInput(node, "einsum output label not in any input");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<EinsumLabels> ParseEinsum(const Node& node, const std::vector<int64_t>& ranks) {
  std::string eq;
  for (char c : node.GetString("equation", "")) {
    if (c != ' ') eq += c;
  }
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::vector<int>> terms;
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    ASSIGN_OR_RETURN(std::vector<int> t, ParseTerm(node, lhs.substr(start, comma - start)));
    terms.push_back(std::move(t));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (terms.size() != ranks.size()) {
    return InvalidInput(node, "einsum equation has " + std::to_string(terms.size()) +
                                  " operands, the node " + std::to_string(ranks.size()));
  }
  EinsumLabels e;
  int64_t ell = 0;
  std::vector<int64_t> ell_counts;
  for (size_t i = 0; i < terms.size(); ++i) {
    const bool has = std::count(terms[i].begin(), terms[i].end(), kEllipsisMarker) > 0;
    const int64_t letters = static_cast<int64_t>(terms[i].size()) - (has ? 1 : 0);
    if (ranks[i] < letters || (!has && ranks[i] != letters)) {
      return InvalidInput(node, "einsum term " + std::to_string(i) + " does not match rank " +
                                    std::to_string(ranks[i]));
    }
    ell_counts.push_back(ranks[i] - letters);
    ell = std::max(ell, ranks[i] - letters);
  }
  for (size_t i = 0; i < terms.size(); ++i) {
    e.inputs.push_back(ExpandEllipsis(terms[i], ell_counts[i], ell));
  }
  if (arrow == std::string::npos) {
    e.output = ImplicitOutput(e.inputs, ell);
  } else {
    ASSIGN_OR_RETURN(std::vector<int> out, ParseTerm(node, eq.substr(arrow + 2)));
    e.output = ExpandEllipsis(out, ell, ell);
  }
  RETURN_IF_ERROR(CheckOutput(node, e));
  return e;
}

namespace {

// The loop nest: output labels first (their sizes are the output shape), then summed ones.
struct EinsumPlan {
  std::vector<int64_t> sizes;
  size_t n_out = 0;
  std::vector<std::vector<int64_t>> strides;  // [operand][loop label]
};

absl::StatusOr<EinsumPlan> PlanEinsum(const Node& node, const EinsumLabels& e,
                                      const std::vector<const Tensor*>& ops) {
  std::map<int, int64_t> size;
  for (size_t i = 0; i < ops.size(); ++i) {
    for (size_t d = 0; d < e.inputs[i].size(); ++d) {
      const int64_t n = ops[i]->dim(static_cast<int64_t>(d));
      auto [it, fresh] = size.emplace(e.inputs[i][d], n);
      if (fresh || it->second == n || n == 1) continue;
      if (it->second != 1) return InvalidInput(node, "einsum label sizes disagree");
      it->second = n;
    }
  }
  std::vector<int> loop = e.output;
  for (const auto& t : e.inputs) {
    for (int l : t) {
      if (std::find(loop.begin(), loop.end(), l) == loop.end()) loop.push_back(l);
    }
  }
  EinsumPlan p;
  p.n_out = e.output.size();
  for (int l : loop) p.sizes.push_back(size[l]);
  for (size_t i = 0; i < ops.size(); ++i) {
    const std::vector<int64_t> st = Strides(ops[i]->shape());
    std::vector<int64_t> s(loop.size(), 0);
    for (size_t d = 0; d < e.inputs[i].size(); ++d) {
      const size_t k = std::find(loop.begin(), loop.end(), e.inputs[i][d]) - loop.begin();
      if (ops[i]->dim(static_cast<int64_t>(d)) != 1) s[k] += st[d];  // size 1 broadcasts
    }
    p.strides.push_back(std::move(s));
  }
  return p;
}

// Advances the loop counters over labels [first, last); returns false after the last one.
bool Advance(const EinsumPlan& p, size_t first, size_t last, std::vector<int64_t>& idx,
             std::vector<int64_t>& offs) {
  for (size_t k = last; k-- > first;) {
    ++idx[k];
    for (size_t i = 0; i < offs.size(); ++i) offs[i] += p.strides[i][k];
    if (idx[k] < p.sizes[k]) return true;
    for (size_t i = 0; i < offs.size(); ++i) offs[i] -= idx[k] * p.strides[i][k];
    idx[k] = 0;
  }
  return false;
}

std::vector<double> RunPlan(const EinsumPlan& p, const std::vector<std::vector<double>>& vals) {
  std::vector<int64_t> out_shape(p.sizes.begin(), p.sizes.begin() + p.n_out);
  std::vector<double> out(static_cast<size_t>(NumElements(out_shape)), 0.0);
  const size_t all = p.sizes.size();
  for (int64_t s : p.sizes) {
    if (s == 0) return out;
  }
  std::vector<int64_t> idx(all, 0), offs(vals.size(), 0);
  int64_t o = 0;
  do {
    double acc = 0.0;
    do {
      double prod = 1.0;
      for (size_t i = 0; i < vals.size(); ++i) prod *= vals[i][offs[i]];
      acc += prod;
    } while (Advance(p, p.n_out, all, idx, offs));
    out[o++] = acc;
  } while (Advance(p, 0, p.n_out, idx, offs));
  return out;
}

absl::StatusOr<std::vector<Tensor>> Einsum(const Node& node, const KernelInputs& in) {
  if (in.empty()) return InvalidInput(node, "einsum needs at least one input");
  std::vector<const Tensor*> ops;
  std::vector<int64_t> ranks;
  for (size_t i = 0; i < in.size(); ++i) {
    ASSIGN_OR_RETURN(const Tensor* t, RequireInput(node, in, i));
    RETURN_IF_ERROR(CheckNumeric(node, *t));
    if (t->dtype() != in[0]->dtype()) return InvalidInput(node, "einsum operand dtypes differ");
    ops.push_back(t);
    ranks.push_back(t->rank());
  }
  ASSIGN_OR_RETURN(EinsumLabels e, ParseEinsum(node, ranks));
  ASSIGN_OR_RETURN(EinsumPlan plan, PlanEinsum(node, e, ops));
  std::vector<int64_t> out_shape(plan.sizes.begin(), plan.sizes.begin() + plan.n_out);
  RETURN_IF_ERROR(CheckedNumel(node, out_shape).status());
  RETURN_IF_ERROR(CheckedNumel(node, plan.sizes).status());  // bounds the total work
  std::vector<std::vector<double>> vals;
  for (const Tensor* t : ops) vals.push_back(ToDoubles(*t));
  return std::vector<Tensor>{FromDoubles(ops[0]->dtype(), out_shape, RunPlan(plan, vals))};
}

}  // namespace

void RegisterEinsumKernels(KernelRegistry& r) { r.Register("", "Einsum", Einsum); }

}  // namespace kiln::ref::nn

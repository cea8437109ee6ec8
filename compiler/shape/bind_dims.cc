#include "compiler/shape/bind_dims.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/shape/dim_expr.h"

namespace kiln::shape {
namespace {

Value* FindInput(Graph& graph, const std::string& name) {
  for (Value* v : graph.inputs) {
    if (v->name == name) return v;
  }
  return nullptr;
}

std::string InputNames(const Graph& graph) {
  std::vector<std::string> names;
  for (const Value* v : graph.inputs) names.push_back(v->name);
  return absl::StrJoin(names, ", ");
}

std::set<std::string> SymbolNames(const Graph& graph) {
  std::set<std::string> names;
  for (const Value* v : graph.inputs) {
    if (!v->shape) continue;
    for (const Dim& d : *v->shape) {
      if (d.known() || d.param.empty()) continue;
      if (!IsDimExpr(d.param)) {
        names.insert(d.param);
        continue;
      }
      for (const std::string& name : DimExprSymbols(d.param)) names.insert(name);
    }
  }
  return names;
}

// Records symbol = value; a second, different value for the same symbol is an error.
absl::Status Note(std::map<std::string, int64_t>& symbols, const std::string& symbol,
                  int64_t value, const std::string& where) {
  auto [it, inserted] = symbols.emplace(symbol, value);
  if (!inserted && it->second != value) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": dim '", symbol, "' is given ", value,
                                                   " here and ", it->second, " elsewhere"));
  }
  return absl::OkStatus();
}

// One input's explicit shape: static dims checked, symbolic ones bound (named ones through
// `symbols`, so the other inputs follow).
absl::Status BindShape(Value& in, const std::vector<int64_t>& want,
                       std::map<std::string, int64_t>& symbols) {
  const std::string where = absl::StrCat("input_shapes['", in.name, "']");
  if (!in.shape) return absl::InvalidArgumentError(where + ": the model declares no rank");
  Shape& shape = *in.shape;
  if (want.size() != shape.size()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", want.size(),
                                                   " dims given, the model's input has ",
                                                   shape.size(), " ", ShapeToString(shape)));
  }
  for (size_t i = 0; i < want.size(); ++i) {
    const int64_t v = want[i];
    if (v == -1) continue;
    if (v < 1) {
      return absl::InvalidArgumentError(absl::StrCat(where, " dim ", i, ": ", v,
                                                     " (a size is at least 1; -1 keeps the model's)"));
    }
    if (shape[i].known()) {
      if (shape[i].value != v) {
        return absl::InvalidArgumentError(absl::StrCat(where, " dim ", i, ": ", v,
                                                       ", but the model fixes it at ",
                                                       shape[i].value));
      }
      continue;
    }
    if (!shape[i].param.empty()) RETURN_IF_ERROR(Note(symbols, shape[i].param, v, where));
    shape[i] = Dim(v);
  }
  return absl::OkStatus();
}

}  // namespace

std::string InputDims::ToString() const {
  std::vector<std::string> parts;
  for (const auto& [name, dims] : shapes) parts.push_back(name + ":" + absl::StrJoin(dims, "x"));
  std::string out = "shapes=" + absl::StrJoin(parts, ",");
  parts.clear();
  for (const auto& [name, v] : symbols) parts.push_back(absl::StrCat(name, ":", v));
  return out + ";symbols=" + absl::StrJoin(parts, ",");
}

absl::Status BindInputDims(Graph& graph, const InputDims& dims) {
  const std::set<std::string> known_symbols = SymbolNames(graph);
  std::map<std::string, int64_t> symbols;
  for (const auto& [name, v] : dims.symbols) {
    if (!known_symbols.count(name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "no input has a dim named '", name, "' (symbolic dims: ",
          known_symbols.empty() ? "none" : absl::StrJoin(known_symbols, ", "), ")"));
    }
    // 0 is a size: an empty dim (a decoder's cache at its first step).
    if (v < 0)
      return absl::InvalidArgumentError(
          absl::StrCat("dim '", name, "' = ", v, ": a size is 0 or more"));
    RETURN_IF_ERROR(Note(symbols, name, v, "--dim"));
  }
  for (const auto& [name, want] : dims.shapes) {
    Value* in = FindInput(graph, name);
    if (!in) {
      return absl::InvalidArgumentError(absl::StrCat("input_shapes names '", name,
                                                     "', which is not an input (inputs: ",
                                                     InputNames(graph), ")"));
    }
    RETURN_IF_ERROR(BindShape(*in, want, symbols));
  }
  for (Value* in : graph.inputs) {
    if (!in->shape) continue;
    for (Dim& d : *in->shape) {
      auto it = d.known() ? symbols.end() : symbols.find(d.param);
      if (it != symbols.end()) d = Dim(it->second);
    }
  }
  BindDimExprs(graph, symbols);  // "past + 1" follows "past"
  return absl::OkStatus();
}

absl::Status CheckStaticInputs(const Graph& graph, bool allow_symbolic_batch) {
  for (const Value* in : graph.inputs) {
    if (!in->shape) {
      return absl::InvalidArgumentError(absl::StrCat("input '", in->name, "' has no declared rank"));
    }
    for (size_t i = allow_symbolic_batch ? 1 : 0; i < in->shape->size(); ++i) {
      const Dim& d = (*in->shape)[i];
      if (d.known()) continue;
      const std::string hint =
          d.param.empty()
              ? absl::StrCat("give its shape (model config input_shapes: {", in->name, ": [...]})")
              : absl::StrCat("give it a value (kiln --dim ", d.param, "=N; model config "
                             "input_shapes)");
      return absl::InvalidArgumentError(
          absl::StrCat("input '", in->name, "' dim ", i,
                       d.param.empty() ? "" : absl::StrCat(" ('", d.param, "')"),
                       " is symbolic: engines are compiled for static shapes; ", hint));
    }
  }
  return absl::OkStatus();
}

}  // namespace kiln::shape

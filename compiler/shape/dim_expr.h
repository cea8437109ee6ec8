// Symbolic dims written as expressions of other symbols, as exporters name a decoder's
// attention mask: ONNX dim_params such as "past_sequence_length + 1" or "past + sequence".
// Such a dim is not a size of its own: it follows from the symbols it names, so binding those
// binds it (BindInputDims, Specialize) and a request must give it exactly that size.
//
// Grammar (spaces ignored): expr := term (('+' | '-') term)*; term := factor ('*' factor)*;
// factor := identifier | non-negative integer. A lone identifier is a plain symbol, not an
// expression.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "ir/graph.h"

namespace kiln::shape {

// True when `param` parses as an expression with at least one operator.
bool IsDimExpr(const std::string& param);

// The identifiers `expr` names, in order of first appearance (empty when it does not parse).
std::vector<std::string> DimExprSymbols(const std::string& expr);

// The value of `expr` with `symbols`' values. INVALID_ARGUMENT when it does not parse, names a
// symbol `symbols` lacks, or comes out below 0.
absl::StatusOr<int64_t> EvalDimExpr(const std::string& expr,
                                    const std::map<std::string, int64_t>& symbols);

// A dim of size `a + b + 1` laid out as consecutive regions, one per term (a decoder's
// mask over its cache then its new positions; Concat(past, new) makes `present` so). The terms
// of `expr` in order, each a symbol (with 0) or a constant ("" with its value); false when
// `expr` is not such a sum (it has '-' or '*', or does not parse).
bool SumTerms(const std::string& expr, std::vector<std::pair<std::string, int64_t>>* terms);

// Gives every graph input dim written as an expression its value when `symbols` has every
// name it uses (others stay symbolic). A value below 0 is left symbolic too: shape inference
// then says which input does not fit.
void BindDimExprs(Graph& graph, const std::map<std::string, int64_t>& symbols);

}  // namespace kiln::shape

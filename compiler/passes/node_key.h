// Text keys that identify what a node computes, for passes that look nodes up by content
// (common-subexpression elimination, the fold cache): equal keys mean equal operator, domain
// and attributes. Tensor attributes are keyed by their bytes, subgraphs by identity.
#pragma once

#include <string>

#include "ir/graph.h"

namespace kiln::passes {

std::string TensorKey(const Tensor& t);  // dtype, shape and bytes
std::string AttrKey(const Attribute& a);
// "domain|op_type|" then every attribute as name=AttrKey; (inputs are the caller's part).
std::string OpAndAttrsKey(const Node& n);

}  // namespace kiln::passes

// Private to rules_reduction.cc and rules_indexing.cc: RegisterReductionRules (the entry point
// infer.cc calls) also registers the indexing and generator rules through this function.
#pragma once

#include "compiler/shape/infer.h"

namespace kiln::shape {

// Gather, GatherElements, GatherND, ScatterElements, ScatterND, OneHot, Trilu, EyeLike, Range.
void RegisterIndexingRules(RuleRegistry& r);

}  // namespace kiln::shape

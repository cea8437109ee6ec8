#include "compiler/shape/infer.h"

namespace kiln::shape {

void RegisterReductionRules(RuleRegistry& r) { (void)r; }

}  // namespace kiln::shape

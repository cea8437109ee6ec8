#include "compiler/shape/infer.h"

namespace kiln::shape {

void RegisterNnRules(RuleRegistry& r) { (void)r; }

}  // namespace kiln::shape

#include "compiler/shape/infer.h"

namespace kiln::shape {

void RegisterKilnRules(RuleRegistry& r) { (void)r; }

}  // namespace kiln::shape

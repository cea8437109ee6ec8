#include "compiler/shape/infer.h"

namespace kiln::shape {

void RegisterElementwiseRules(RuleRegistry& r) { (void)r; }

}  // namespace kiln::shape

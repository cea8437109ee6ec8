#include "compiler/shape/infer.h"

namespace kiln::shape {

void RegisterTensorRules(RuleRegistry& r) { (void)r; }

}  // namespace kiln::shape

#include "runtime/reference/kernel.h"

namespace kiln::ref {

void RegisterReductionKernels(KernelRegistry& r) { (void)r; }

}  // namespace kiln::ref

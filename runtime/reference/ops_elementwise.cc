#include "runtime/reference/kernel.h"

namespace kiln::ref {

void RegisterElementwiseKernels(KernelRegistry& r) { (void)r; }

}  // namespace kiln::ref

#include "runtime/reference/kernel.h"

namespace kiln::ref {

void RegisterNnKernels(KernelRegistry& r) { (void)r; }

}  // namespace kiln::ref

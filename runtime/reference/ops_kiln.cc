#include "runtime/reference/kernel.h"

namespace kiln::ref {

void RegisterKilnKernels(KernelRegistry& r) { (void)r; }

}  // namespace kiln::ref

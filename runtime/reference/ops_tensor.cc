#include "runtime/reference/kernel.h"

namespace kiln::ref {

void RegisterTensorKernels(KernelRegistry& r) { (void)r; }

}  // namespace kiln::ref

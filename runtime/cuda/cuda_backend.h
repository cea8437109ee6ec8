// The "cuda" and "cuda:N" devices: the CUDA engine, or in a build without the toolkit its
// stub, which answers UNIMPLEMENTED (runtime/backend.h).
#pragma once

#include "runtime/backend.h"

namespace kiln::cuda {

const runtime::Backend& CudaBackend();

}  // namespace kiln::cuda

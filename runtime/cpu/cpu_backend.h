// The "cpu" device: the oneDNN engine (runtime/backend.h).
#pragma once

#include "runtime/backend.h"

namespace kiln::cpu {

const runtime::Backend& CpuBackend();

}  // namespace kiln::cpu

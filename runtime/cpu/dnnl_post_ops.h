// Internal to runtime/cpu: translating ai.kiln epilogues into oneDNN post-ops.
#pragma once

#include <vector>

#include "oneapi/dnnl/dnnl.hpp"

#include "compiler/ir/kiln_ops.h"

namespace kiln::cpu {

// Appends one activation step; false when oneDNN 2.6 has no equivalent.
bool AppendActivation(dnnl::post_ops& po, const kiln_ops::EpilogueStep& step);

}  // namespace kiln::cpu

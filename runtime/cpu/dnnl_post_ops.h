// Internal to runtime/cpu: translating ai.kiln epilogues into oneDNN post-ops.
#pragma once

#include <vector>

#include "ir/kiln_ops.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace kiln::cpu {

// Appends one activation step; false when oneDNN 2.6 has no equivalent.
bool AppendActivation(dnnl::post_ops& po, const kiln_ops::EpilogueStep& step);

// Whether oneDNN's post-op for this activation gives what ONNX's op gives for NaN and +-Inf
// (checked in tests/unit/cpu_nonfinite_test.cc). ReLU (alpha 0), Clip and HardSigmoid do
// not: oneDNN computes them with max/min instructions that return the non-NaN operand.
bool PostOpKeepsNonFinite(const kiln_ops::EpilogueStep& step);

}  // namespace kiln::cpu

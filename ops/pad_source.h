// Where a padded coordinate reads from, shared by the reference Pad and the CPU engine's so
// the two agree on every mode (reflection wider than the axis included).
#pragma once

#include <cstdint>
#include <string>

namespace kiln::ref {

// Maps coordinate i (of an axis of n elements, before-padding already subtracted) into
// [0, n) for modes edge, wrap and reflect; -1 where the constant value is used (mode
// constant, outside the axis).
int64_t PadSource(int64_t i, int64_t n, const std::string& mode);

}  // namespace kiln::ref

// The reference interpreter with an observer: every value a node computes (and every graph
// input) is shown to `observe` before it is released. Calibration reads each activation's
// range this way without holding the whole run's intermediates.
#pragma once

#include <functional>

#include "ops/interpreter.h"

namespace kiln::ref {

using ValueObserver = std::function<void(const Value& value, const Tensor& tensor)>;

// As Run (same checks, same outputs), calling `observe` once per graph input and once per
// node output computed at the top level (not inside control-flow bodies).
absl::StatusOr<TensorMap> RunObserved(const Graph& graph, const TensorMap& inputs,
                                      const ValueObserver& observe);

}  // namespace kiln::ref

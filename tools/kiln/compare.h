// Numeric comparison as the ONNX backend test runner does it:
// |actual - expected| <= atol + rtol * |expected|, NaN matches NaN, infinities must match.
#pragma once

#include <string>

#include "compiler/ir/tensor.h"

namespace kiln::tools {

struct Comparison {
  bool ok = true;
  double max_abs_err = 0.0;
  double max_rel_err = 0.0;
  std::string message;  // why it failed (dtype, shape, worst element)
};

Comparison CompareTensors(const Tensor& actual, const Tensor& expected, double rtol, double atol);

}  // namespace kiln::tools

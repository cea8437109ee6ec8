// Numeric comparison of one tensor against the expected one, as the ONNX backend test runner
// does it: |actual - expected| <= atol + rtol * |expected|, NaN matches NaN, infinities must
// match, integers and bools exactly (compared as integers, not through double). Used by
// `kiln check` against conformance data and by the differential check and the server's
// warm-up against the reference interpreter.
#pragma once

#include <map>
#include <string>

#include "ir/tensor.h"

namespace kiln::check {

struct Tolerance {
  double rtol = 1e-3;
  double atol = 1e-4;
  // Per-output floors of atol (CompareOutputs): an int8 model's outputs (differential.h).
  std::map<std::string, double> output_atol = {};
};

struct Divergence {
  bool ok = true;
  double max_abs_err = 0.0;
  double max_rel_err = 0.0;
  // ||actual - expected||_2 / ||expected||_2 over the finite elements of a float tensor (the
  // largest over a map's outputs): a tensor's relative error, which a precision budget bounds.
  double norm_rel_err = 0.0;
  std::string message;  // the first failure: dtype, shape, or the worst element
};

Divergence CompareTensors(const Tensor& actual, const Tensor& expected, const Tolerance& tol);

}  // namespace kiln::check

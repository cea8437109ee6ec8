// How much of a noise added to one value of a float graph reaches its outputs: the estimate
// int8-mixed ranks products by (quantize_int8.h), so that the products kept in float are the
// ones whose rounding the answer feels, not the ones whose rounding is locally the largest.
//
// Noise powers propagate under a linear model fed by the calibration's mean squares (ms):
// an Add or Sub passes each input's noise power on unchanged; a Mul scales one input's noise
// by the other's ms (a transformer's layer scale of 1e-6 silences its block's rounding);
// every other op (a product, an activation, a normalization, a reshape) keeps the noise's
// power relative to the signal: n_out = n_in * ms(out) / ms(in). Sensitivity S(v) is the
// relative noise power summed over the graph's outputs per unit of noise power at v,
// computed backwards: S(output) = 1 / ms(output), S(in) += gain * S(out). A product's
// quantization adds about step^2 / 12 at its activation and at its result, so its share of
// the outputs' relative error is (that power at the result) * S(result). An estimate for
// ranking, not a bound: the warm-up check measures the engine that results.
#pragma once

#include <unordered_map>

#include "compiler/passes/quantize_int8.h"
#include "ir/graph.h"

namespace kiln::passes {

// The mean square of a float value: a constant's computed, an activation's from the
// calibration; 0 when unknown (no finite range observed, not float32).
double MeanSquareOf(const Calibration& ranges, const Value* v);

// S(v) for every float value a path of float ops leads from to an output (absent: 0). The
// graph's nodes must be in topological order.
std::unordered_map<const Value*, double> NoiseSensitivity(const Graph& graph,
                                                          const Calibration& ranges);

}  // namespace kiln::passes

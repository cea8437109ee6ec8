// Shape classes: every size of a dynamic dim served by a few engines, each request zero-padded
// up to its class and its outputs cut back to the request's own sizes.
//
// A dynamic model's range (server/model/dim_profiles.h) is cut into classes (ClassLadder): the
// typical size, the range's end and a ladder of sizes between (x1.5 / x2 steps, so a padded
// request does at most half again the work it needs). Engines exist for every class and batch
// bucket before the model is READY (server/serving/shape_engines.h), so no size inside the range
// builds anything after load, and requests of different lengths in one class batch together.
//
// Padding is only sound for a model whose outputs at the request's positions do not depend on
// what fills the padded ones: an encoder that masks attention by an input mask, a decoder with
// a causal mask. That is a property of the model, so it is proven once per model against the
// reference interpreter (server/model/padding_proof.h) before any request is padded; a model that
// fails the proof keeps one engine set per exact shape.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "ir/tensor.h"

namespace kiln::server {

// A size for every dynamic symbol ("sequence" -> 17).
using DimValues = std::map<std::string, int64_t>;
// Per tensor, per dim: the dynamic symbol that dim carries ("" for none).
using DimSymbols = std::vector<std::vector<std::string>>;
// Per padded symbol, the sizes engines are built at, ascending; the last is the range's end.
using ShapeClasses = std::map<std::string, std::vector<int64_t>>;

// The classes of one symbol served over [min, max]: `min`, `typical`, `max` and every ladder
// size 16, 24, 32, 48, 64, 96, ... (powers of two and 1.5 times them; with `coarse`, powers of
// two only) strictly inside the range; sizes between `min` and 16 pad to the next class (a
// few positions). A `min` of 0 serves as 1 (an empty dim pads to the first class).
// Precondition: 0 <= min <= typical <= max, 1 <= typical.
std::vector<int64_t> ClassLadder(int64_t min, int64_t max, int64_t typical, bool coarse = false);

// Every combination of one class per symbol (the engines to build), first symbol slowest.
std::vector<DimValues> AllClasses(const ShapeClasses& classes);

// `dims` with each symbol in `classes` rounded up to its class (the smallest class >= the
// size); symbols without classes kept. INVALID_ARGUMENT for a size above the last class.
absl::StatusOr<DimValues> ClassOf(const ShapeClasses& classes, const DimValues& dims);

// Every tensor whose dims carry a symbol of `to` resized so those dims have its size there,
// going from the sizes `from` (pad the inputs to a class: from the request's sizes to the
// class; cut outputs back: the reverse). A dim labelled with a sum of symbols ("past +
// sequence", "past + 1") is a run of regions, one per term in order, each padded or cut at
// its own end (a decoder's mask over its cache then its new positions). Other tensors and
// dims stay as they are. `symbols` has one row per tensor (missing rows: nothing to resize).
absl::StatusOr<std::vector<Tensor>> ResizeToDims(std::vector<Tensor> tensors,
                                                 const DimSymbols& symbols, const DimValues& from,
                                                 const DimValues& to);

}  // namespace kiln::server

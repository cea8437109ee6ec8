// int8 calibration: the range of every float32 value a graph computes, observed on the
// reference interpreter over some feeds, as TensorRT's and ONNX Runtime's MinMax calibrators
// take them. compiler/passes/quantize_int8.h quantizes with it; kilnd calibrates on the
// warm-up rows (server/model/calibration.h), `kiln bench --precision int8` on its feed.
#pragma once

#include <memory>
#include <vector>

#include "base/status.h"
#include "compiler/passes/quantize_int8.h"
#include "ir/graph.h"
#include "ops/interpreter.h"

namespace kiln::check {

// Min, max and mean square of each float32 value over `feeds` (graph inputs included; empty
// feeds are skipped); a value that held NaN or an infinity gets an infinite range, which
// quantize_int8 leaves in float. FAILED_PRECONDITION when nothing was observed. `outputs`
// (optional): the reference's answer to each feed (empty for a skipped one), so a caller that
// also needs it runs the reference once.
absl::StatusOr<std::shared_ptr<const passes::Calibration>> Calibrate(
    const Graph& graph, const std::vector<const ref::TensorMap*>& feeds,
    std::vector<ref::TensorMap>* outputs = nullptr);

}  // namespace kiln::check

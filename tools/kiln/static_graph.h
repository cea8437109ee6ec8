// Compiling a test graph for an engine, which serves static shapes (`kiln check --backend
// cpu|cuda`, the CUDA corpus tests): the graph's inputs are already bound to a data set's
// shapes; where output shapes still depend on input values, the shape-like inputs (small
// integer tensors, Resize scales, Range bounds) are frozen as constants with the fed values,
// as an engine built for one input configuration would have them.
#pragma once

#include <memory>
#include <set>

#include "base/status.h"
#include "compiler/compile.h"
#include "compiler/pipeline.h"
#include "ops/interpreter.h"
#include "runtime/engine.h"

namespace kiln::tools {

// Whether a compile or build failed only because some shape is not static.
bool NeedsStaticShapes(const absl::Status& st);
// A clone of `graph` whose shape-like inputs are constants with the fed values.
std::unique_ptr<Graph> FreezeShapeInputs(const Graph& graph, const ref::TensorMap& feeds);
// The batch an engine for this graph serves: dim 0 of the first input when known, else 1.
int64_t BatchOf(const Graph& graph);

// The passes that stay off on `backend` here (compiler/pipeline.h PassesOffFor, with this
// CPU's int8 dot product for "cpu").
std::set<std::string> PassesOffHere(const std::string& backend);

// Compiles at `level` for BatchOf(graph), retrying with frozen shape inputs when shapes are
// not static; UNIMPLEMENTED when they stay data-dependent.
absl::StatusOr<CompiledGraph> CompileStatic(const Graph& graph, const ref::TensorMap& feeds,
                                            OptLevel level, const std::string& backend = "cpu");

// Runs `engine` once on `feeds`, taken by the engine's input names; INVALID_ARGUMENT naming
// an input without a feed.
absl::Status RunOnFeeds(runtime::Engine& engine, const ref::TensorMap& feeds,
                        std::vector<Tensor>& outputs);

}  // namespace kiln::tools

// An Engine over the reference interpreter: slow, obviously correct, and available for every
// operator the interpreter knows. The server's "reference" device, and the baseline the
// warm-up check compares other engines against.
#pragma once

#include <memory>

#include "base/status.h"
#include "compiler/compile.h"
#include "runtime/backend.h"
#include "runtime/engine.h"

namespace kiln::runtime {

// Keeps its own clone of the compiled graph (constants shared), so `compiled` may go away.
// Fails when an input or output shape is not static (compile for one batch size first).
absl::StatusOr<std::unique_ptr<Engine>> BuildReferenceEngine(const CompiledGraph& compiled);
// The same over a bare graph (shapes static): the raw graph, skipping the pipeline.
absl::StatusOr<std::unique_ptr<Engine>> BuildReferenceEngine(const Graph& graph);

// The "reference" device: no pass is kept off, nothing depends on the machine.
const Backend& ReferenceBackend();

}  // namespace kiln::runtime

// The engine for graphs whose shapes depend on input values, on any backend (NonZero,
// NonMaxSuppression, Unique, Compress, a Reshape to a computed shape, a Loop with a data-dependent
// trip count).
//
// The graph is split in two regions. The static region is every node whose outputs have
// static shapes and whose inputs are graph inputs, constants or static-region values: it is
// a sub-graph planned and built by the backend (the CPU engine, the CUDA engine) exactly as a
// fully static graph would be. Every other node is in the dynamic
// region: a second sub-graph that the reference interpreter runs per call, its inputs the
// graph inputs and the static values it reads, its tensors allocated per run. The dynamic
// region's nodes count as fallback ops in EngineInfo.
//
// Output specs: a dim that is only known per run is -1 (an output of unknown rank has an
// empty shape); Run resizes such outputs on every call.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "base/status.h"
#include "compiler/compile.h"
#include "runtime/engine.h"

namespace kiln::runtime {

// Builds the planned engine for the static region's compiled sub-graph.
using StaticEngineBuilder =
    std::function<absl::StatusOr<std::unique_ptr<Engine>>(const CompiledGraph&)>;

// `compiled` may have an empty plan (CompileOptions::allow_dynamic_shapes). `device` names
// the backend's device ("cpu", "cuda:0") in messages and, with `layout`, in EngineInfo when
// there is no static region to build.
absl::StatusOr<std::unique_ptr<Engine>> BuildDynamicEngine(const CompiledGraph& compiled,
                                                           const StaticEngineBuilder& build_static,
                                                           const std::string& device,
                                                           const char* layout);

// Whether `engine` is the two-region engine above (tests: a static graph never gets it).
bool HasDynamicRegion(const Engine& engine);

}  // namespace kiln::runtime

// Test helper: a graph compiled at O2 and built as a blocked-layout CPU engine on two
// threads, with the caller's other engine options (the Winograd tests' engine).
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "compiler/compile.h"
#include "runtime/cpu/cpu_engine.h"

namespace kiln::testing {

inline std::unique_ptr<runtime::Engine> BuildBlockedCpuEngine(const Graph& g,
                                                              cpu::CpuEngineOptions eo) {
  CompileOptions co;
  co.pipeline.level = OptLevel::kO2;
  auto compiled = CompileGraph(g, co);
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  if (!compiled.ok()) return nullptr;
  eo.layout = cpu::ActivationLayout::kBlocked;
  eo.threads = 2;
  auto engine = cpu::BuildCpuEngine(*compiled, eo);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return engine.ok() ? std::move(*engine) : nullptr;
}

}  // namespace kiln::testing

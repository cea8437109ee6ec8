// Test-only faults for kilnd (--enable-test-faults, hidden from --help). They let the
// integration test prove that the warm-up check catches a wrong optimized engine and repairs
// it by disabling the pass that broke it. Never enabled in production.
#pragma once

#include "base/status.h"

namespace kiln::server {

// The name of the deliberately broken pass.
inline constexpr char kPerturbConstantPass[] = "test_perturb_constant";

// Registers test_perturb_constant at the end of the O1/O2 pipelines (after
// eliminate_dead_code): it adds 1 to the first float constant some node reads, through a new
// constant (constants are shared with the raw graph, so editing one in place would break
// the reference too). Call once, before any model loads.
absl::Status EnableTestFaults();

}  // namespace kiln::server

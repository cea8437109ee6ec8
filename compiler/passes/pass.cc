#include "compiler/passes/pass.h"

#include <chrono>

#include "ir/verifier.h"

namespace kiln::passes {

absl::StatusOr<PassStats> Pass::Run(Graph& graph, bool verify) {
  PassStats stats;
  stats.name = name();
  auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<bool> changed = RunImpl(graph);
  stats.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                 .count();
  if (!changed.ok()) {
    return absl::Status(changed.status().code(),
                        "pass " + stats.name + ": " + std::string(changed.status().message()));
  }
  stats.changed = *changed;
  stats.ops_after = graph.nodes().size();
  if (verify) {
    absl::Status st = VerifyGraph(graph);
    if (!st.ok()) {
      return absl::InternalError("pass " + stats.name + " broke the IR: " +
                                 std::string(st.message()));
    }
  }
  return stats;
}

}  // namespace kiln::passes

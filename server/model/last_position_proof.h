// A decoder cut to the logits of its last position (compiler/shape/last_position.h) for the
// prefill steps of the generation loop, proven before any engine is built from it: the
// reference interpreter runs the model and the cut graph on one seeded feed at small sizes,
// and the cut graph's logits must be the model's at the last position, every other output
// (the presents) unchanged. The engines built from the cut graph are warm-up checked against
// it like any shape's; this proof ties it to the model.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "compiler/shape/last_position.h"
#include "ir/graph.h"
#include "server/model/model_config.h"
#include "server/model/padding.h"

namespace kiln::server {

struct LastPositionGraph {
  std::unique_ptr<Graph> graph;  // symbolic dims as the model's
  shape::LastPositionCut cut;
  double prove_ms = 0;
  std::string by_mask_refused;  // why the cut by the mask was not kept, when one was asked
};

// Inlines the Ifs whose condition is a constant (a merged decoder's bound use_cache_branch:
// its logits are an If's output until then), cuts `logits` along axis 1 and proves the cut at
// `probe` (every dynamic symbol's size, batch 1). FAILED_PRECONDITION when there is nothing
// to cut or the proof fails (the message says which output moved).
//
// With `mask` (the decoder's attention mask) the cut keeps the mask's last real position
// (CutToLastPosition's `mask`); the proof then also runs a chunk whose last new positions are
// padding (mask 0 there), whose cut logits must be the model's at its last real position.
// Where that cut cannot be made or proven, the plain cut is tried (`by_mask` false).
absl::StatusOr<LastPositionGraph> CutToLastPositionProven(const Graph& model,
                                                          const std::string& logits,
                                                          const DimValues& probe,
                                                          const WarmupConfig& warmup,
                                                          const std::string& mask = "");

}  // namespace kiln::server

// Turns an imported graph into servable engines: one compiled graph per batch bucket, one
// engine per (bucket, instance), each checked on warm-up against the reference interpreter
// running the raw graph. A mismatch bisects the pass pipeline, disables the first pass that
// moved the answer (for this model only), rebuilds and re-checks.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"
#include "compiler/ir/graph.h"
#include "runtime/engine.h"
#include "server/model_config.h"
#include "server/model_signature.h"

namespace kiln::server {

struct CheckSummary {
  bool ran = false;
  bool ok = true;
  double max_abs_err = 0.0, max_rel_err = 0.0;
  std::string message;
  std::set<std::string> disabled_passes;  // switched off by the bisection
};

struct BuiltModel {
  ModelSignature signature;
  std::vector<int64_t> buckets;  // the batch sizes engines exist for
  // bucket -> one engine per instance.
  std::map<int64_t, std::vector<std::unique_ptr<runtime::Engine>>> engines;
  std::string report_json;  // the compile report of the largest bucket
  CheckSummary check;
};

// Reports progress ("compiling batch 4") while building; may be empty.
using ProgressFn = std::function<void(const std::string&)>;

// `config` must be finalized. FAILED_PRECONDITION when the warm-up check still fails after
// the bisection (the message says why); other errors pass through from the compiler/engine.
absl::StatusOr<BuiltModel> BuildModel(const Graph& imported, const ModelConfig& config,
                                      const ProgressFn& progress);

// Inputs of a model by name, dim 0 -1 when batchable (before any engine exists).
absl::StatusOr<ModelSignature> SignatureOf(const Graph& imported, const ModelConfig& config);

}  // namespace kiln::server

// Whether kilnd serves: every loaded model version READY and the repository read. Answered
// by GET /readyz and by the v2 ServerReady RPC alike.
#pragma once

#include <string>

#include "server/serving/model_registry.h"

namespace kiln::server {

// The /readyz verdict: ok, and one line per model that is not READY.
struct Readiness {
  bool ready = true;
  std::string body;
};
Readiness CheckReadiness(const ModelRegistry& registry);

}  // namespace kiln::server

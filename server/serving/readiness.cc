#include "server/serving/readiness.h"

#include "absl/strings/str_cat.h"

namespace kiln::server {

Readiness CheckReadiness(const ModelRegistry& registry) {
  Readiness r;
  if (!registry.repository_loaded()) {
    r.ready = false;
    r.body = "loading the model repository\n";
  }
  for (const auto& mv : registry.List()) {
    if (mv->state() == ModelState::kReady) continue;
    r.ready = false;
    absl::StrAppend(&r.body, mv->name(), " version ", mv->version(), ": ",
                    ModelStateName(mv->state()), mv->reason().empty() ? "" : " (", mv->reason(),
                    mv->reason().empty() ? "" : ")", "\n");
  }
  if (r.ready) r.body = "ready\n";
  return r;
}

}  // namespace kiln::server

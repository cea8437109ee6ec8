// The KServe v2 protocol's REST binding on kilnd's HTTP port (the routes under /v2): health,
// server and model metadata, configuration, statistics, inference with JSON tensors and the
// binary tensor extension, and the repository (index, load, unload). Answers are the same
// messages the gRPC binding returns (server/serving/kserve_model.h), written as JSON; errors are
// {"error": "..."} with the HTTP status of the absl code (HttpStatusFor).
#pragma once

#include <httplib.h>

#include <string>

#include "base/status.h"
#include "server/http/http.h"
#include "server/serving/model_registry.h"

namespace kiln::server {

// The HTTP status for an absl code (400 bad request, 404 unknown model, 503 not ready, ...).
int HttpStatusFor(absl::StatusCode code);

// {"error": "<message>"}, the message cut at 2 KB; SendError answers it with the status's HTTP
// code.
std::string ErrorBody(const absl::Status& s);
void SendError(httplib::Response& res, const absl::Status& s);

// Registers every /v2 route on `router`; `registry` must outlive it.
void AddKServeRoutes(httplib::Server& router, ModelRegistry& registry, const HttpOptions& options);

}  // namespace kiln::server

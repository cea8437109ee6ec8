// What every inference entry point shares once its transport has decoded the request
// (kiln.v1 Predict/BatchPredict, KServe v2 ModelInfer/ModelStreamInfer over gRPC, v2 REST
// infer): finding the READY version, queueing on its batcher and waiting within the deadline,
// and recording the request in the metrics and the version's statistics. Protocol-neutral:
// everything here speaks absl::Status, mapped to gRPC or HTTP codes by the transports.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "server/metrics/kiln_metrics.h"
#include "server/serving/batcher.h"
#include "server/serving/model_registry.h"
#include "server/serving/request_validation.h"

namespace kiln::server {

// The version a request names, READY; UNAVAILABLE (with the reason) when it is LOADING or
// FAILED, NOT_FOUND when it is not loaded.
absl::StatusOr<std::shared_ptr<ModelVersion>> FindReady(const ModelRegistry& registry,
                                                        const std::string& name,
                                                        std::optional<int64_t> version);
// A KServe v2 version string: empty means "not given"; otherwise a positive decimal integer.
absl::StatusOr<std::optional<int64_t>> ParseVersion(std::string_view text);

// How long a request's client waits, and how to tell that it has stopped waiting. The
// waiter sets `abandoned` when it gives up, and the batch running the request stops at its
// next step once every request in it is abandoned (server/serving/batcher.h).
struct RequestWait {
  std::optional<Clock::time_point> deadline;
  // Polled while waiting (gRPC: ServerContext::IsCancelled); null: only the deadline.
  std::function<bool()> client_gone;
  AbandonFlag abandoned = std::make_shared<std::atomic<bool>>(false);
};

// DEADLINE_EXCEEDED when `deadline` has already passed (before anything is queued).
absl::Status CheckDeadline(std::optional<Clock::time_point> deadline);
// The future's result; DEADLINE_EXCEEDED once the deadline passes, CANCELLED once the client
// has gone (both abandon the request).
absl::StatusOr<std::vector<Tensor>> Await(std::future<Batcher::Result>& f, const RequestWait& w);
// Queues validated inputs on `mv` and waits for its output rows.
absl::StatusOr<std::vector<Tensor>> RunOn(ModelVersion& mv, ValidatedInputs in,
                                          const RequestWait& w);

// Accounts for one inference request from construction to Finish: kiln_inflight_requests
// while alive, then kiln_requests_total and kiln_request_duration_seconds under `method`, and
// the version's statistics (ModelStats) once the request reached a version.
class RequestRecorder {
 public:
  RequestRecorder(const ModelRegistry& registry, const char* method)
      : registry_(registry), method_(method), start_(Clock::now()) {}
  // The version the request is for: its statistics count this request, success or failure.
  void Reached(std::shared_ptr<ModelVersion> mv) { mv_ = std::move(mv); }
  // Rows the request carries (counted as inferences when it succeeds).
  void SetRows(int64_t rows) { rows_ = rows; }
  // Records the outcome under the requested model name (the metrics' label is that name
  // only when the model is loaded, else "") and passes `s` through.
  absl::Status Finish(const std::string& model, absl::Status s);

 private:
  const metrics::InflightRequest inflight_;
  const ModelRegistry& registry_;
  const char* const method_;
  const Clock::time_point start_;
  std::shared_ptr<ModelVersion> mv_;
  int64_t rows_ = 0;
};

}  // namespace kiln::server

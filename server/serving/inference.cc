#include "server/serving/inference.h"

#include <algorithm>

#include "server/common/echo.h"

namespace kiln::server {

absl::StatusOr<std::shared_ptr<ModelVersion>> FindReady(const ModelRegistry& registry,
                                                        const std::string& name,
                                                        std::optional<int64_t> version) {
  ASSIGN_OR_RETURN(auto mv, registry.Find(name, version));
  if (mv->state() != ModelState::kReady) {
    const std::string reason = mv->reason();
    return absl::UnavailableError(absl::StrCat("model '", name, "' version ", mv->version(), " is ",
                                               ModelStateName(mv->state()),
                                               reason.empty() ? "" : ": ", reason));
  }
  return mv;
}

absl::StatusOr<std::optional<int64_t>> ParseVersion(std::string_view text) {
  if (text.empty()) return std::optional<int64_t>();
  const std::optional<int64_t> v = ParseVersionNumber(text);
  if (!v) {
    return absl::InvalidArgumentError(
        absl::StrCat("model version must be a positive integer, got '", EchoName(text), "'"));
  }
  return v;
}

absl::Status CheckDeadline(std::optional<Clock::time_point> deadline) {
  if (deadline && *deadline <= Clock::now()) {
    return absl::DeadlineExceededError("the deadline expired before the request was queued");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Tensor>> Await(std::future<Batcher::Result>& f, const RequestWait& w) {
  // How often a waiter looks at its client: the longest a gone client's batch keeps running.
  constexpr auto kPoll = std::chrono::milliseconds(50);
  if (!w.deadline && !w.client_gone) return f.get();
  for (;;) {
    Clock::time_point until = Clock::now() + kPoll;
    if (!w.client_gone) until = *w.deadline;
    if (w.deadline) until = std::min(until, *w.deadline);
    if (f.wait_until(until) == std::future_status::ready) return f.get();
    if (w.deadline && Clock::now() >= *w.deadline) {
      w.abandoned->store(true);
      return absl::DeadlineExceededError("the deadline expired while the request was running");
    }
    if (w.client_gone && w.client_gone()) {
      w.abandoned->store(true);
      return absl::CancelledError("the client cancelled the request");
    }
  }
}

absl::StatusOr<std::vector<Tensor>> RunOn(ModelVersion& mv, ValidatedInputs in,
                                          const RequestWait& w) {
  RETURN_IF_ERROR(CheckDeadline(w.deadline));
  ASSIGN_OR_RETURN(auto future, mv.Submit(std::move(in), w.deadline, w.abandoned));
  return Await(future, w);
}

absl::Status RequestRecorder::Finish(const std::string& model, absl::Status s) {
  const Clock::duration elapsed = Clock::now() - start_;
  const bool known = s.ok() || mv_ || registry_.Find(model, std::nullopt).ok();
  metrics::RecordRequest(known ? model : "", method_, s.code(), elapsed);
  if (mv_ && mv_->stats()) mv_->stats()->RecordRequest(s.ok(), elapsed, rows_);
  return s;
}

}  // namespace kiln::server

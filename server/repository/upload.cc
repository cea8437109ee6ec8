#include "server/repository/upload.h"

#include "server/common/crash_point.h"
#include "server/common/echo.h"
#include "server/model/model_config.h"

namespace kiln::server {

UploadLimiter::Slot::~Slot() {
  if (!owner_) return;
  std::lock_guard<std::mutex> lk(owner_->mu_);
  --owner_->active_;
  owner_->bytes_ -= bytes_;
}

absl::Status UploadLimiter::Slot::Reserve(int64_t bytes) {
  std::lock_guard<std::mutex> lk(owner_->mu_);
  if (owner_->bytes_ + bytes > owner_->limits_.max_bytes_in_flight) {
    return absl::ResourceExhaustedError(
        absl::StrCat("uploads in progress would exceed max_upload_bytes_in_flight (",
                     owner_->limits_.max_bytes_in_flight, "); retry later"));
  }
  owner_->bytes_ += bytes;
  bytes_ += bytes;
  return absl::OkStatus();
}

absl::StatusOr<UploadLimiter::Slot> UploadLimiter::Acquire() {
  std::lock_guard<std::mutex> lk(mu_);
  if (active_ >= limits_.max_concurrent) {
    return absl::ResourceExhaustedError(absl::StrCat("max_concurrent_uploads (",
                                                     limits_.max_concurrent,
                                                     ") uploads are in progress; retry later"));
  }
  ++active_;
  return Slot(this);
}

int UploadLimiter::active() const {
  std::lock_guard<std::mutex> lk(mu_);
  return active_;
}

absl::Status UploadReceiver::TakeHead(const v1::LoadModelChunk& chunk) {
  RETURN_IF_ERROR(ValidateModelName(chunk.name()));
  if (chunk.version() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model version must be >= 1 (or 0 for the next), got ", chunk.version()));
  }
  if (!chunk.config_yaml().empty()) {
    RETURN_IF_ERROR(ParseModelConfig(chunk.config_yaml(), ModelConfig{}, "config_yaml").status());
  }
  head_ = UploadHead{chunk.name(), chunk.version(), chunk.config_yaml()};
  return absl::OkStatus();
}

absl::Status UploadReceiver::CheckSameHead(const v1::LoadModelChunk& chunk) const {
  if (!chunk.name().empty() && chunk.name() != head_.name) {
    return absl::InvalidArgumentError(absl::StrCat("chunk ", chunks_, " names model '",
                                                   EchoName(chunk.name()), "', the upload is '",
                                                   head_.name, "'"));
  }
  if (chunk.version() != 0 && chunk.version() != head_.version) {
    return absl::InvalidArgumentError(absl::StrCat("chunk ", chunks_, " names version ",
                                                   chunk.version(), ", the upload is version ",
                                                   head_.version));
  }
  if (!chunk.config_yaml().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk ", chunks_, " carries config_yaml; only the first chunk may"));
  }
  return absl::OkStatus();
}

absl::Status UploadReceiver::Add(const v1::LoadModelChunk& chunk) {
  RETURN_IF_ERROR(chunks_ == 0 ? TakeHead(chunk) : CheckSameHead(chunk));
  ++chunks_;
  const auto n = static_cast<int64_t>(chunk.data().size());
  if (bytes_ + n > limits_.max_model_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the model exceeds max_model_bytes (", limits_.max_model_bytes, ")"));
  }
  RETURN_IF_ERROR(slot_.Reserve(n));
  RETURN_IF_ERROR(staged_.Append(chunk.data()));
  bytes_ += n;
  if (bytes_ > 0) CrashPoint("upload-streaming");
  return absl::OkStatus();
}

absl::StatusOr<UploadHead> UploadReceiver::Finish() {
  if (bytes_ == 0) return absl::InvalidArgumentError("the upload holds no model bytes");
  RETURN_IF_ERROR(staged_.Finish(head_.config_yaml));
  CrashPoint("upload-staged");
  return head_;
}

}  // namespace kiln::server

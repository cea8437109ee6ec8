// LoadModel's stream handling, without gRPC: limits on uploads in progress (how many, their
// bytes together) and the chunk rules of one stream, written to a staged file as the chunks
// come, so an upload never sits whole in memory. The gRPC handler (grpc_model_service.cc)
// feeds chunks in and adds the stall timeout (stall_watchdog.h); the fuzzer feeds chunk
// sequences straight in.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

#include "base/status.h"
#include "kiln/v1/model.pb.h"
#include "server/repository/model_repository.h"

namespace kiln::server {

struct UploadLimits {
  int64_t max_model_bytes = int64_t{1} << 30;      // one upload
  int max_concurrent = 4;                          // LoadModel calls in progress, build included
  int64_t max_bytes_in_flight = int64_t{2} << 30;  // received by every call in progress
  std::chrono::milliseconds stall_timeout{30000};  // a stream that sends nothing this long ends
};

// Counts uploads in progress and their bytes. Thread-safe; must outlive its slots.
class UploadLimiter {
 public:
  explicit UploadLimiter(const UploadLimits& limits) : limits_(limits) {}

  // One upload's share: its place among max_concurrent and the bytes it reserved.
  class Slot {
   public:
    Slot(Slot&& other) noexcept : owner_(other.owner_), bytes_(other.bytes_) {
      other.owner_ = nullptr;
    }
    Slot& operator=(Slot&&) = delete;
    ~Slot();
    // RESOURCE_EXHAUSTED when the uploads in progress would hold more than
    // max_bytes_in_flight together.
    absl::Status Reserve(int64_t bytes);

   private:
    friend class UploadLimiter;
    explicit Slot(UploadLimiter* owner) : owner_(owner) {}
    UploadLimiter* owner_;
    int64_t bytes_ = 0;
  };

  // RESOURCE_EXHAUSTED when max_concurrent uploads are in progress: a caller is refused at
  // once rather than parked on a server thread.
  absl::StatusOr<Slot> Acquire();
  int active() const;

 private:
  const UploadLimits limits_;
  mutable std::mutex mu_;
  int active_ = 0;     // guarded by mu_
  int64_t bytes_ = 0;  // guarded by mu_
};

// What the first chunk said.
struct UploadHead {
  std::string name;
  int64_t version = 0;  // 0: next
  std::string config_yaml;
};

// One stream's chunks into `staged`. The first chunk carries the name (validated at once, so
// a bad one costs no transfer), optional version (>= 0) and config_yaml (parsed at once);
// later chunks may repeat the name and version but not change them, and carry only data.
class UploadReceiver {
 public:
  UploadReceiver(const UploadLimits& limits, UploadLimiter::Slot& slot, StagedModel& staged)
      : limits_(limits), slot_(slot), staged_(staged) {}

  absl::Status Add(const v1::LoadModelChunk& chunk);
  // The end of the stream: at least one byte of model, and the staged files closed.
  absl::StatusOr<UploadHead> Finish();

 private:
  absl::Status TakeHead(const v1::LoadModelChunk& chunk);
  absl::Status CheckSameHead(const v1::LoadModelChunk& chunk) const;

  const UploadLimits& limits_;
  UploadLimiter::Slot& slot_;
  StagedModel& staged_;
  UploadHead head_;
  int64_t chunks_ = 0, bytes_ = 0;
};

}  // namespace kiln::server

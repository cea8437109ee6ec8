// libFuzzer target: LoadModel's stream handling (server/repository/upload.h) into a scratch model
// repository: the chunk rules, the limits, staging, commit and removal, without gRPC. The
// input is a sequence of frames, [u16 little-endian length][bytes]; a frame that parses as a
// LoadModelChunk is one, any other is a chunk of raw data. Built by run_fuzz.sh (--target
// upload) with clang++ -fsanitize=fuzzer,address,undefined.
//
// Properties: a stream ends in an upload or in INVALID_ARGUMENT / RESOURCE_EXHAUSTED with a
// bounded message; an accepted upload's staged file holds exactly the chunks' data, and once
// committed the repository serves those bytes under the head's name and version; whatever
// happened, the repository is left clean (Recover finds nothing to do).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "base/file.h"
#include "server/repository/model_repository.h"
#include "server/repository/upload.h"

namespace {

namespace fs = std::filesystem;
using kiln::server::ModelRepository;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "fuzz_upload: %s\n", what.c_str());
  std::abort();
}

ModelRepository& Repository() {
  static ModelRepository* repo = [] {
    const fs::path base = fs::exists("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
    const fs::path root = base / ("kiln_fuzz_upload_" + std::to_string(getpid()));
    fs::remove_all(root);
    std::atexit([] { fs::remove_all(Repository().root()); });
    return new ModelRepository(*ModelRepository::Open(root.string()));
  }();
  return *repo;
}

void CheckError(const absl::Status& s) {
  if (s.code() != absl::StatusCode::kInvalidArgument &&
      s.code() != absl::StatusCode::kResourceExhausted) {
    Fail("unexpected status: " + s.ToString());
  }
  if (s.message().size() > 1024) Fail("an unbounded message");
}

// Feeds the frames; the concatenated data of the chunks it accepted in `sent`.
absl::StatusOr<kiln::server::UploadHead> Receive(const uint8_t* data, size_t size,
                                                 kiln::server::StagedModel& staged,
                                                 std::string& sent) {
  kiln::server::UploadLimits limits;
  limits.max_model_bytes = 2048;
  limits.max_bytes_in_flight = 3000;
  kiln::server::UploadLimiter limiter(limits);
  auto slot = limiter.Acquire();
  kiln::server::UploadReceiver receiver(limits, *slot, staged);
  while (size >= 2) {
    const size_t n = std::min<size_t>(size - 2, data[0] | (size_t{data[1]} << 8));
    kiln::v1::LoadModelChunk chunk;
    if (!chunk.ParseFromArray(data + 2, static_cast<int>(n))) {
      chunk.Clear();
      chunk.set_data(std::string(reinterpret_cast<const char*>(data + 2), n));
    }
    data += 2 + n;
    size -= 2 + n;
    RETURN_IF_ERROR(receiver.Add(chunk));
    sent += chunk.data();
  }
  return receiver.Finish();
}

}  // namespace

// Hostile bytes in string fields are expected; protobuf's log line for each is noise.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ModelRepository& repo = Repository();
  {
    auto staged = repo.Stage();
    if (!staged.ok()) Fail("cannot stage: " + staged.status().ToString());
    std::string sent;
    auto head = Receive(data, size, **staged, sent);
    if (!head.ok()) {
      CheckError(head.status());
    } else {
      if (kiln::ReadWholeFile((*staged)->model_path()) != sent)
        Fail("the staged file is not the chunks' data");
      const int64_t version = head->version ? head->version : 1;
      if (absl::Status s = repo.Commit(**staged, head->name, version); !s.ok())
        Fail("commit: " + s.ToString());
      if (kiln::ReadWholeFile(repo.ModelPath(head->name, version)) != sent)
        Fail("committed bytes differ");
      auto found = repo.Find(head->name);
      if (!found.ok() || found->versions != std::vector<int64_t>{version})
        Fail("the commit is not found");
      if (found->config_yaml != head->config_yaml) Fail("the committed config differs");
      if (absl::Status s = repo.Remove(head->name, std::nullopt); !s.ok())
        Fail("remove: " + s.ToString());
    }
  }
  if (!repo.Recover().empty()) Fail("the upload left something behind");
  return 0;
}

// LoadModel's stream handling without gRPC: the chunk rules, the limits on uploads in
// progress, the per-name lock and the stall watchdog.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "base/file.h"
#include "server/common/keyed_mutex.h"
#include "server/common/stall_watchdog.h"
#include "server/repository/upload.h"

namespace kiln::server {
namespace {
namespace fs = std::filesystem;

class UploadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // One folder per process: ctest runs this file's cases in parallel processes.
    root_ = fs::path(::testing::TempDir()) / ("kiln_upload_unit_" + std::to_string(getpid()));
    fs::remove_all(root_);
    repo_.emplace(*ModelRepository::Open(root_.string()));
    staged_ = *repo_->Stage();
  }
  void TearDown() override {
    staged_.reset();
    fs::remove_all(root_);
  }
  static v1::LoadModelChunk Chunk(const std::string& data, const std::string& name = "",
                                  int64_t version = 0, const std::string& yaml = "") {
    v1::LoadModelChunk c;
    c.set_name(name);
    c.set_version(version);
    c.set_config_yaml(yaml);
    c.set_data(data);
    return c;
  }
  fs::path root_;
  std::optional<ModelRepository> repo_;
  std::unique_ptr<StagedModel> staged_;
  UploadLimits limits_;
};

TEST_F(UploadTest, ChunksStreamIntoTheStagedFile) {
  UploadLimiter limiter(limits_);
  auto slot = limiter.Acquire();
  UploadReceiver r(limits_, *slot, *staged_);
  ASSERT_TRUE(r.Add(Chunk("ab", "m", 3, "instances: 1\n")).ok());
  ASSERT_TRUE(r.Add(Chunk("cd", "m", 3)).ok());  // repeating the head is fine
  ASSERT_TRUE(r.Add(Chunk("e")).ok());
  auto head = r.Finish();
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_EQ(head->name, "m");
  EXPECT_EQ(head->version, 3);
  EXPECT_EQ(head->config_yaml, "instances: 1\n");
  EXPECT_EQ(ReadWholeFile(staged_->model_path()), "abcde");
}

TEST_F(UploadTest, TheHeadIsCheckedBeforeAnyTransfer) {
  UploadLimiter limiter(limits_);
  auto slot = limiter.Acquire();
  struct Case {
    v1::LoadModelChunk first;
    absl::StatusCode code;
    std::string says;
  };
  const Case cases[] = {
      {Chunk("x", ""), absl::StatusCode::kInvalidArgument, "invalid model name"},
      {Chunk("x", "a/b"), absl::StatusCode::kInvalidArgument, "only letters"},
      {Chunk("x", std::string(5000, 'a')), absl::StatusCode::kInvalidArgument, "(5000 bytes)"},
      {Chunk("x", "m", -1), absl::StatusCode::kInvalidArgument, "got -1"},
      {Chunk("x", "m", 0, "colour: red"), absl::StatusCode::kInvalidArgument, "colour"},
      {Chunk("x", "m", 0, "{[1, 2]: 3}"), absl::StatusCode::kInvalidArgument, "config_yaml"},
  };
  for (const Case& c : cases) {
    UploadReceiver r(limits_, *slot, *staged_);
    absl::Status s = r.Add(c.first);
    EXPECT_EQ(s.code(), c.code) << c.first.name().substr(0, 20);
    EXPECT_NE(s.message().find(c.says), std::string::npos) << s.message();
    EXPECT_LT(s.message().size(), 400u);
  }
  EXPECT_EQ(staged_->bytes(), 0);
}

TEST_F(UploadTest, LaterChunksMayNotRenameTheUpload) {
  UploadLimiter limiter(limits_);
  auto slot = limiter.Acquire();
  for (const v1::LoadModelChunk& bad :
       {Chunk("y", "other"), Chunk("y", "", 4), Chunk("y", "", 0, "instances: 2\n")}) {
    UploadReceiver r(limits_, *slot, *staged_);
    ASSERT_TRUE(r.Add(Chunk("x", "m", 3)).ok());
    EXPECT_EQ(r.Add(bad).code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST_F(UploadTest, EmptyAndOversizedUploads) {
  limits_.max_model_bytes = 10;
  UploadLimiter limiter(limits_);
  auto slot = limiter.Acquire();
  {
    UploadReceiver r(limits_, *slot, *staged_);
    EXPECT_EQ(r.Finish().status().code(), absl::StatusCode::kInvalidArgument);  // no chunk
  }
  {
    UploadReceiver r(limits_, *slot, *staged_);
    ASSERT_TRUE(r.Add(Chunk("", "m")).ok());
    EXPECT_EQ(r.Finish().status().code(), absl::StatusCode::kInvalidArgument);  // no bytes
  }
  UploadReceiver r(limits_, *slot, *staged_);
  ASSERT_TRUE(r.Add(Chunk("123456", "m")).ok());
  absl::Status s = r.Add(Chunk("7890x"));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("max_model_bytes (10)"), std::string::npos) << s.message();
}

TEST(UploadLimiter, BoundsUploadsAndTheirBytesTogether) {
  UploadLimits limits;
  limits.max_concurrent = 2;
  limits.max_bytes_in_flight = 100;
  UploadLimiter limiter(limits);
  {
    auto a = limiter.Acquire();
    auto b = limiter.Acquire();
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(limiter.Acquire().status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_TRUE(a->Reserve(60).ok());
    EXPECT_EQ(b->Reserve(41).code(), absl::StatusCode::kResourceExhausted);
    EXPECT_TRUE(b->Reserve(40).ok());
    EXPECT_EQ(limiter.active(), 2);
  }
  // Released with their bytes.
  EXPECT_EQ(limiter.active(), 0);
  auto c = limiter.Acquire();
  EXPECT_TRUE(c->Reserve(100).ok());
}

TEST(KeyedMutex, SerializesOneKeyNotOthersAndForgetsIdleKeys) {
  KeyedMutex locks;
  std::atomic<int> inside{0}, most{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      for (int k = 0; k < 200; ++k) {
        const KeyedMutex::Lock lock = locks.Acquire("same");
        most = std::max(most.load(), ++inside);
        --inside;
      }
    });
  }
  {
    const KeyedMutex::Lock other = locks.Acquire("other");  // never waits for "same"
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(most.load(), 1);
  EXPECT_EQ(locks.size(), 0u);
}

TEST(StallWatchdog, CancelsOnlyCallsThatStopMakingProgress) {
  StallWatchdog dog(std::chrono::milliseconds(100));
  std::atomic<int> stalled_cancels{0}, busy_cancels{0};
  auto stalled = dog.Start([&] { ++stalled_cancels; });
  auto busy = dog.Start([&] { ++busy_cancels; });
  for (int i = 0; i < 30; ++i) {
    busy.Touch();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(stalled.fired());
  EXPECT_EQ(stalled_cancels.load(), 1);  // once
  EXPECT_FALSE(busy.fired());
  EXPECT_EQ(busy_cancels.load(), 0);
  std::atomic<int> finished_cancels{0};
  {
    auto finished = dog.Start([&] { ++finished_cancels; });
  }  // a finished call is never cancelled afterwards
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  EXPECT_EQ(finished_cancels.load(), 0);
}

}  // namespace
}  // namespace kiln::server

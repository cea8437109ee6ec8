// Chaos: kill -9 at every step of an upload and of a build (crash points armed with the hidden
// --test-crash-at STEP, plus kills at arbitrary moments of a long compile), a full disk under
// the repository and the engine cache, and uploads, unloads and predicts racing on one name.
// After each, a restart must find the repository, the engine cache and readiness consistent:
// every model as it was before the upload or as the upload made it, whole, READY, nothing
// half-written left behind.
#include <sys/mount.h>

#include <atomic>
#include <future>
#include <optional>
#include <random>
#include <set>

#include "tests/server/test_server.h"

namespace kiln::server::testing {
namespace {

using grpc::StatusCode;

const std::string kOldConfig = "max_batch_size: 2\n";
const std::string kNewConfig = "max_batch_size: 1\n";

// The repository the upload tests start from: m version 1, the example model, serving.
void SeedRepository(const TestServer& s) {
  fs::create_directories(s.repo() / "m/1");
  std::ofstream(s.repo() / "m/1/model.onnx") << ExampleOnnx();
  std::ofstream(s.repo() / "m/config.yaml") << kOldConfig;
}

// Files a crash may leave that a restart must have cleaned: staged uploads and temporaries.
std::vector<std::string> Leftovers(const fs::path& dir) {
  std::vector<std::string> out;
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const std::string rel = fs::relative(e.path(), dir).string();
    if (e.is_regular_file() &&
        (rel.rfind(".staging/", 0) == 0 || rel.find(".tmp.") != std::string::npos)) {
      out.push_back(rel);
    }
  }
  return out;
}

// After a restart: m is READY, /readyz 200, nothing left over, and m is wholly the old model
// with the old config or wholly the new one with the new config (which, `want_new` says).
void ExpectConsistent(TestServer& s, const std::string& new_model, std::optional<bool> want_new,
                      const std::string& step) {
  SCOPED_TRACE("crash at " + step);
  ASSERT_TRUE(s.WaitReady());
  EXPECT_EQ(s.WaitLoaded("m"), v1::MODEL_STATE_READY);
  EXPECT_EQ(Leftovers(s.repo()), std::vector<std::string>{});
  std::vector<std::string> files = s.RepoFiles();
  std::erase_if(files, [](const std::string& f) { return f.rfind("m/", 0) != 0; });
  EXPECT_EQ(files, (std::vector<std::string>{"m/1/model.onnx", "m/config.yaml"}));
  const std::string model = ReadFile(s.repo() / "m/1/model.onnx");
  const std::string config = ReadFile(s.repo() / "m/config.yaml");
  const bool is_new = model == new_model;
  EXPECT_TRUE(is_new || model == ExampleOnnx()) << "a model that is neither upload, whole";
  EXPECT_EQ(config, is_new ? kNewConfig : kOldConfig) << "the model and its config disagree";
  if (want_new) {
    EXPECT_EQ(is_new, *want_new);
  }
  v1::ModelInfo info;
  ASSERT_TRUE(s.GetModel("m", 1, &info).ok());
  ASSERT_EQ(info.inputs_size(), 1);
  grpc::Status p = s.Predict("m", info.inputs(0).shape(1));
  EXPECT_TRUE(p.ok()) << p.error_message();
}

TEST(Chaos, KillAtEveryStepOfAReupload) {
  // Before the commit record the upload never happened; from it on, it is finished at start.
  const std::vector<std::pair<std::string, bool>> steps = {
      {"upload-streaming", false}, {"upload-staged", false},     {"upload-built", false},
      {"commit-recorded", true},   {"commit-model-moved", true}, {"upload-committed", true}};
  const std::string new_model = MlpOnnx(16, 3);
  for (const auto& [step, want_new] : steps) {
    TestServer s("chaos_step");
    SeedRepository(s);
    s.Start("", "", {"--test-crash-at=" + step});
    ASSERT_EQ(s.WaitLoaded("m"), v1::MODEL_STATE_READY) << step;
    UploadSpec up("m", new_model, 1, kNewConfig);
    up.chunk = 256;  // several chunks, so the crash comes mid-stream
    const grpc::Status st = s.Upload(up);
    EXPECT_EQ(st.error_code(), StatusCode::UNAVAILABLE) << step << ": " << st.error_message();
    EXPECT_EQ(s.process().Wait(), -1) << step << ": kilnd did not die there";
    s.Start();
    ExpectConsistent(s, new_model, want_new, step);
  }
}

// The same at arbitrary moments: a 4 MB re-upload streamed in 16 KB chunks, killed somewhere
// between its first chunk and its reply.
TEST(Chaos, KillAReuploadAtRandomMoments) {
  const std::string new_model = MlpOnnx(1024, 5);
  std::mt19937 rng(20);
  TestServer s("chaos_random");
  SeedRepository(s);
  int saw_old = 0, saw_new = 0;
  for (int round = 0; round < 10; ++round) {
    s.Start("max_model_bytes: 67108864");
    ASSERT_TRUE(s.WaitReady());
    const bool is_new = ReadFile(s.repo() / "m/1/model.onnx") == new_model;
    // Back to the old model first when the last round left the new one.
    if (is_new) {
      ASSERT_TRUE(s.Upload({"m", ExampleOnnx(), 1, kOldConfig}).ok());
    }
    const int delay_ms = std::uniform_int_distribution<int>(0, 400)(rng);
    auto upload = std::async(std::launch::async, [&] {
      UploadSpec up("m", new_model, 1, kNewConfig);
      up.chunk = 16 << 10;
      return s.Upload(up);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    s.Kill();
    upload.get();
    s.Start();
    ExpectConsistent(s, new_model, std::nullopt, absl::StrCat("a kill after ", delay_ms, " ms"));
    (ReadFile(s.repo() / "m/1/model.onnx") == new_model ? saw_new : saw_old)++;
    s.Kill();
  }
  std::printf("10 kills at random moments of a re-upload: %d left the old model, %d the new one\n",
              saw_old, saw_new);
}

// Before, a kill -9 while a failing upload loaded left it in the repository: it came back
// FAILED at every start and held /readyz at 503 until someone unloaded it.
TEST(Chaos, KillDuringAFailingUploadLeavesReadinessAlone) {
  TestServer s("chaos_failing");
  s.Start("", "", {"--test-crash-at=build-started"});  // empty repository: the upload's build
  EXPECT_EQ(s.Upload({"bad", UnbuildableOnnx()}).error_code(), StatusCode::UNAVAILABLE);
  EXPECT_EQ(s.process().Wait(), -1) << "kilnd did not die in the build";
  s.Start();
  EXPECT_TRUE(s.WaitReady(10));
  EXPECT_EQ(s.GetModel("bad").error_code(), StatusCode::NOT_FOUND);
  EXPECT_EQ(s.RepoFiles(), std::vector<std::string>{});
}

TEST(Chaos, KillWhileBuildingAtStartAndWhileWritingTheEngineCache) {
  for (const std::string step : {"build-started", "cache-written"}) {
    TestServer s("chaos_build");
    SeedRepository(s);
    const std::string cache = (s.dir() / "cache").string();
    s.Start("", "engine_cache_dir: '" + cache + "'\n", {"--test-crash-at=" + step});
    EXPECT_EQ(s.process().Wait(), -1) << step << ": kilnd did not die there";
    if (step == "cache-written") {
      EXPECT_FALSE(Leftovers(cache).empty()) << "the crash left no temporary";
    }
    s.Start("", "engine_cache_dir: '" + cache + "'\n");
    ExpectConsistent(s, "", false, step);
    EXPECT_EQ(Leftovers(cache), std::vector<std::string>{}) << step;
    EXPECT_FALSE(fs::is_empty(cache)) << step << ": the restart cached its engines";
    // And the next start loads from those entries.
    EXPECT_EQ(s.Stop(), 0);
    s.Start("", "engine_cache_dir: '" + cache + "'\n");
    ExpectConsistent(s, "", false, step + " (warm)");
  }
}

TEST(Chaos, KillDuringALongCompileAtArbitraryMoments) {
  TestServer s("chaos_compile");
  SeedRepository(s);
  const std::string slow = ConvChainOnnx(150, 32, 56);  // a few seconds to load
  int mid_build = 0;
  for (int delay_ms : {100, 400, 900, 1600, 2500}) {
    s.Start();
    ASSERT_EQ(s.WaitLoaded("m"), v1::MODEL_STATE_READY);
    auto upload = std::async(std::launch::async, [&] {
      return s.Upload({"slow", slow, 0, kOldConfig});
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    s.Kill();
    const bool answered_ok = upload.get().ok();
    s.Start();
    SCOPED_TRACE(delay_ms);
    ExpectConsistent(s, "", false, "a kill during a compile");
    // Killed before its commit the upload is gone; after it (even before the reply reached
    // the client) it is there and READY. Never FAILED, never half there.
    v1::ModelInfo info;
    const grpc::Status st = s.GetModel("slow", 0, &info);
    if (st.ok()) {
      EXPECT_EQ(s.WaitLoaded("slow"), v1::MODEL_STATE_READY);
    } else {
      EXPECT_EQ(st.error_code(), StatusCode::NOT_FOUND);
      EXPECT_FALSE(answered_ok);
      ++mid_build;
      EXPECT_FALSE(fs::exists(s.repo() / "slow"));
    }
    if (st.ok()) {
      ASSERT_TRUE(s.Unload("slow", 0, true).ok());
    }
    s.Kill();
  }
  std::printf("5 kills during an upload's compile: %d before its commit\n", mid_build);
  EXPECT_GE(mid_build, 2);
}

// A small tmpfs as a full disk. Needs root (mount); skipped elsewhere.
class Tmpfs {
 public:
  Tmpfs(const fs::path& at, const std::string& size) : at_(at) {
    fs::create_directories(at);
    mounted_ = mount("tmpfs", at.c_str(), "tmpfs", 0, ("size=" + size).c_str()) == 0;
  }
  ~Tmpfs() {
    if (mounted_) umount2(at_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }

 private:
  fs::path at_;
  bool mounted_ = false;
};

TEST(Chaos, AFullDiskGivesCleanErrorsAndLosesNothing) {
  TestServer s("chaos_full");
  Tmpfs repo(s.repo(), "1m");
  if (!repo.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  Tmpfs cache(s.dir() / "cache", "32k");
  SeedRepository(s);
  s.Start("max_model_bytes: 67108864",
          "engine_cache_dir: '" + (s.dir() / "cache").string() + "'\n");
  ASSERT_EQ(s.WaitLoaded("m"), v1::MODEL_STATE_READY);  // engine cache writes failed: logged
  // 4 MB into 1 MB: the staging write fails.
  grpc::Status st = s.Upload({"m", MlpOnnx(1024, 1), 1, kNewConfig});
  EXPECT_EQ(st.error_code(), StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  EXPECT_NE(st.error_message().find("No space left on device"), std::string::npos)
      << st.error_message();
  st = s.Upload({"big", MlpOnnx(1024, 2)});
  EXPECT_EQ(st.error_code(), StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  ExpectConsistent(s, "", false, "a full disk");
  EXPECT_EQ(Leftovers(s.dir() / "cache"), std::vector<std::string>{});
  // The space the failed uploads took is back: a small one fits.
  st = s.Upload({"small", ExampleOnnx()});
  EXPECT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(s.Stop(), 0);
  s.Start("", "engine_cache_dir: '" + (s.dir() / "cache").string() + "'\n");
  ExpectConsistent(s, "", false, "a full disk, restarted");
  EXPECT_EQ(s.WaitLoaded("small"), v1::MODEL_STATE_READY);
  EXPECT_EQ(s.Stop(), 0);
}

// Uploads (new versions and re-uploads of version 1), unloads (with and without the files)
// and predicts on one name for a few seconds. Every call ends in an expected status; after
// it, every loaded version has its files, and a restart serves exactly the stored versions.
TEST(Chaos, UploadsUnloadsAndPredictsOnOneName) {
  TestServer s("chaos_race");
  SeedRepository(s);
  s.Start();
  ASSERT_EQ(s.WaitLoaded("m"), v1::MODEL_STATE_READY);
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::map<std::string, int> outcomes;
  auto record = [&](const char* what, const grpc::Status& st) {
    std::lock_guard<std::mutex> lk(mu);
    outcomes[absl::StrCat(what, " ", st.error_code())]++;
  };
  std::vector<std::thread> threads;
  for (int u = 0; u < 2; ++u) {
    threads.emplace_back([&, u] {
      for (int i = 0; !stop; ++i) record("upload", s.Upload({"m", ExampleOnnx(), u == 0 ? 0 : 1}));
    });
  }
  threads.emplace_back([&] {
    for (int i = 0; !stop; ++i) {
      record("unload", s.Unload("m", i % 3 == 0 ? 0 : 2 + i % 4, i % 2 == 0));
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
    }
  });
  for (int p = 0; p < 2; ++p) {
    threads.emplace_back([&] {
      while (!stop) record("predict", s.Predict("m", 8));
    });
  }
  std::this_thread::sleep_for(std::chrono::seconds(4));
  stop = true;
  for (auto& t : threads) t.join();
  for (const auto& [what, n] : outcomes) std::printf("  %s: %d\n", what.c_str(), n);
  const std::set<std::string> allowed = {"upload 0", "unload 0", "unload 5", "predict 0",
                                         "predict 5"};
  for (const auto& [what, n] : outcomes) EXPECT_TRUE(allowed.count(what)) << what << " x" << n;
  // Loaded versions have their files; files without a loaded version were unloaded without
  // deleting them, which a restart loads again.
  std::set<int64_t> stored;
  for (const std::string& f : s.RepoFiles()) {
    if (f.rfind("m/", 0) == 0 && f.find("/model.onnx") != std::string::npos) {
      stored.insert(std::stoll(f.substr(2, f.find('/', 2) - 2)));
    }
  }
  for (const auto& [v, state] : s.Versions("m")) {
    EXPECT_TRUE(stored.count(v)) << "version " << v << " is loaded without its file";
    EXPECT_EQ(state, v1::MODEL_STATE_READY);
  }
  EXPECT_EQ(Leftovers(s.repo()), std::vector<std::string>{});
  EXPECT_EQ(s.Stop(), 0);
  s.Start();
  EXPECT_TRUE(s.WaitReady());
  std::set<int64_t> loaded;
  for (const auto& [v, state] : s.Versions("m")) {
    loaded.insert(v);
    EXPECT_EQ(state, v1::MODEL_STATE_READY) << v;
  }
  EXPECT_EQ(loaded, stored);
  EXPECT_EQ(s.Readyz(), 200);
}

}  // namespace
}  // namespace kiln::server::testing

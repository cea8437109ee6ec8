// The model repository on disk: scanning, versions, atomic stores, removal, names.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include "base/file.h"
#include "server/repository/model_repository.h"
#include "server/serving/model_registry.h"
#include "server/serving/readiness.h"

namespace kiln::server {
namespace {
namespace fs = std::filesystem;

class RepositoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) /
            ("kiln_repo_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  void Touch(const fs::path& p, const std::string& text = "x") {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  fs::path root_;
};

TEST_F(RepositoryTest, ScanFindsVersionsAndConfig) {
  Touch(root_ / "b" / "1" / "model.onnx");
  Touch(root_ / "b" / "10" / "model.onnx");
  Touch(root_ / "b" / "2" / "model.onnx");
  Touch(root_ / "b" / "config.yaml", "max_batch_size: 2\n");
  Touch(root_ / "a" / "3" / "model.onnx");
  Touch(root_ / "a" / "notaversion" / "model.onnx");
  Touch(root_ / "a" / "4" / "other.onnx");  // no model.onnx: not a version
  Touch(root_ / "empty" / "readme.txt");
  auto repo = ModelRepository::Open(root_.string());
  ASSERT_TRUE(repo.ok());
  std::vector<std::string> skipped;
  auto models = repo->Scan(&skipped);
  ASSERT_TRUE(models.ok()) << models.status();
  ASSERT_EQ(models->size(), 2u);
  EXPECT_EQ((*models)[0].name, "a");
  EXPECT_EQ((*models)[0].versions, (std::vector<int64_t>{3}));
  EXPECT_EQ((*models)[1].versions, (std::vector<int64_t>{1, 2, 10}));
  EXPECT_EQ((*models)[1].config_yaml, "max_batch_size: 2\n");
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find("empty"), std::string::npos);
}

TEST_F(RepositoryTest, StoreAssignsNextVersionAndLeavesNoTempFiles) {
  auto repo = ModelRepository::Open(root_.string());
  ASSERT_TRUE(repo.ok());
  EXPECT_EQ(*repo->Store("m", std::nullopt, "onnx1", ""), 1);
  EXPECT_EQ(*repo->Store("m", std::nullopt, "onnx2", "instances: 1\n"), 2);
  EXPECT_EQ(*repo->Store("m", 7, "onnx7", ""), 7);
  auto m = repo->Find("m");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->versions, (std::vector<int64_t>{1, 2, 7}));
  EXPECT_EQ(m->config_yaml, "instances: 1\n");
  std::ifstream in(repo->ModelPath("m", 2));
  std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(text, "onnx2");
  for (const auto& e : fs::recursive_directory_iterator(root_)) {
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
  }
  EXPECT_FALSE(repo->Store("m", 0, "x", "").ok());
}

TEST_F(RepositoryTest, RemoveVersionAndModel) {
  auto repo = ModelRepository::Open(root_.string());
  ASSERT_TRUE(repo->Store("m", 1, "a", "").ok());
  ASSERT_TRUE(repo->Store("m", 2, "b", "").ok());
  ASSERT_TRUE(repo->Remove("m", 2).ok());
  EXPECT_EQ(repo->Find("m")->versions, (std::vector<int64_t>{1}));
  ASSERT_TRUE(repo->Remove("m", std::nullopt).ok());
  EXPECT_EQ(repo->Find("m").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(RepositoryTest, AStagedUploadTouchesNothingUntilCommitted) {
  auto repo = ModelRepository::Open(root_.string());
  ASSERT_TRUE(repo->Store("m", 1, "old", "old: config\n").ok());
  fs::path staged_dir;
  {
    auto staged = repo->Stage();
    ASSERT_TRUE(staged.ok()) << staged.status();
    ASSERT_TRUE((*staged)->Append("ne").ok());
    ASSERT_TRUE((*staged)->Append("w").ok());
    ASSERT_TRUE((*staged)->Finish("new: config\n").ok());
    EXPECT_EQ((*staged)->bytes(), 3);
    staged_dir = fs::path((*staged)->model_path()).parent_path();
    // Not committed: the repository is as it was.
    EXPECT_EQ(ReadWholeFile(repo->ModelPath("m", 1)), "old");
    EXPECT_EQ(repo->Find("m")->config_yaml, "old: config\n");
  }
  EXPECT_FALSE(fs::exists(staged_dir)) << "an abandoned upload is removed";
  auto staged = repo->Stage();
  ASSERT_TRUE((*staged)->Append("new").ok());
  EXPECT_EQ(repo->Commit(**staged, "m", 1).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE((*staged)->Finish("new: config\n").ok());
  ASSERT_TRUE(repo->Commit(**staged, "m", 1).ok());
  EXPECT_EQ(ReadWholeFile(repo->ModelPath("m", 1)), "new");
  EXPECT_EQ(repo->Find("m")->config_yaml, "new: config\n");
  EXPECT_TRUE(fs::is_empty(root_ / ".staging"));
}

std::set<std::string> FilesIn(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

// An upload is built from its staging folder and served after a restart from its version
// folder: whatever the build can find beside the model (external data) must be there too.
// So while it is built the staging folder holds exactly what the commit puts into the version
// folder (config.yaml, which the commit moves up to the model's folder, is written then).
TEST_F(RepositoryTest, AStagedModelsFolderHoldsWhatItsVersionFolderWill) {
  auto repo = ModelRepository::Open(root_.string());
  for (const std::string config : {"", "instances: 1\n"}) {
    auto staged = repo->Stage();
    ASSERT_TRUE(staged.ok()) << staged.status();
    ASSERT_TRUE((*staged)->Append("bytes").ok());
    ASSERT_TRUE((*staged)->Finish(config).ok());
    const std::set<std::string> building = FilesIn(fs::path((*staged)->model_path()).parent_path());
    ASSERT_TRUE(repo->Commit(**staged, "m", 1).ok());
    EXPECT_EQ(building, FilesIn(fs::path(repo->ModelPath("m", 1)).parent_path()))
        << "config: '" << config << "'";
    EXPECT_EQ(repo->Find("m")->config_yaml, config);
  }
}

TEST_F(RepositoryTest, ConcurrentStagesNeverShareAFolder) {
  auto repo = ModelRepository::Open(root_.string());
  std::vector<std::unique_ptr<StagedModel>> staged;
  std::set<std::string> paths;
  for (int i = 0; i < 20; ++i) {
    staged.push_back(*repo->Stage());
    paths.insert(staged.back()->model_path());
  }
  EXPECT_EQ(paths.size(), 20u);
}

TEST_F(RepositoryTest, VersionOverflowIsOutOfRange) {
  EXPECT_EQ(*NextVersion("m", 0), 1);
  EXPECT_EQ(*NextVersion("m", 41), 42);
  EXPECT_EQ(NextVersion("m", std::numeric_limits<int64_t>::max()).status().code(),
            absl::StatusCode::kOutOfRange);
  auto repo = ModelRepository::Open(root_.string());
  ASSERT_TRUE(repo->Store("m", std::numeric_limits<int64_t>::max(), "a", "").ok());
  EXPECT_EQ(repo->Store("m", std::nullopt, "b", "").status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(repo->Find("m")->versions.size(), 1u);
}

// What kill -9 can leave: a staged upload without its commit record (removed), one with it
// (finished: moved into place), temporary files of atomic writes and empty version folders
// (removed). Models and configs that were in place stay.
TEST_F(RepositoryTest, RecoverFinishesCommitsAndRemovesLeftovers) {
  Touch(root_ / "keep" / "1" / "model.onnx", "kept");
  Touch(root_ / "keep" / "config.yaml", "instances: 1\n");
  Touch(root_ / ".staging" / "upload.1.0" / "model.onnx", "half an upload");
  Touch(root_ / ".staging" / "upload.1.1" / "model.onnx", "committed");
  Touch(root_ / ".staging" / "upload.1.1" / "config.yaml", "max_batch_size: 1\n");
  Touch(root_ / ".staging" / "upload.1.1" / "commit", "keep\n2\n");
  Touch(root_ / ".staging" / "upload.1.2" / "model.onnx", "bad record");
  Touch(root_ / ".staging" / "upload.1.2" / "commit", "../etc\n2\n");
  Touch(root_ / ".staging" / "upload.1.3" / ".commit.tmp.1.0", "keep\n3\n");
  Touch(root_ / "keep" / "1" / ".model.onnx.tmp.4242", "partial");
  Touch(root_ / "keep" / ".config.yaml.tmp.4242.7", "partial");
  fs::create_directories(root_ / "keep" / "9");
  auto repo = ModelRepository::Open(root_.string());
  const std::vector<std::string> notes = repo->Recover();
  EXPECT_EQ(notes.size(), 7u);
  for (const auto& n : notes) std::printf("  recover: %s\n", n.c_str());
  EXPECT_TRUE(fs::is_empty(root_ / ".staging"));
  EXPECT_EQ(repo->Find("keep")->versions, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(ReadWholeFile(repo->ModelPath("keep", 1)), "kept");
  EXPECT_EQ(ReadWholeFile(repo->ModelPath("keep", 2)), "committed");
  EXPECT_EQ(repo->Find("keep")->config_yaml, "max_batch_size: 1\n");
  EXPECT_FALSE(fs::exists(root_ / "keep" / "9"));
  EXPECT_FALSE(fs::exists(root_ / "keep" / "1" / ".model.onnx.tmp.4242"));
  EXPECT_TRUE(repo->Recover().empty()) << "a second pass finds nothing";
  std::vector<std::string> skipped;
  EXPECT_EQ(repo->Scan(&skipped)->size(), 1u);
  EXPECT_TRUE(skipped.empty()) << skipped[0];
}

// A full disk is the client's to retry elsewhere or later (tests/server/chaos_test.cc fills a
// real one); other I/O errors are the server's.
TEST_F(RepositoryTest, FileErrorsSayWhetherTheDiskIsFull) {
  auto w = FileWriter::Create(root_ / "x");  // root_ does not exist yet
  EXPECT_FALSE(w.ok());
  EXPECT_EQ(FileError(ENOSPC, "cannot write f").code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(FileError(EIO, "cannot write f").code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(IsTempName(TempNameFor(root_ / "model.onnx").filename().string()));
  EXPECT_FALSE(IsTempName("model.onnx"));
}

TEST(ModelName, Validation) {
  EXPECT_TRUE(ValidateModelName("resnet-50_v1.2").ok());
  EXPECT_FALSE(ValidateModelName("").ok());
  EXPECT_FALSE(ValidateModelName("..").ok());
  EXPECT_FALSE(ValidateModelName("a/b").ok());
  EXPECT_FALSE(ValidateModelName(".hidden").ok());
  EXPECT_FALSE(ValidateModelName(std::string(200, 'a')).ok());
  // A long name is quoted back cut short, whatever it holds.
  const absl::Status s = ValidateModelName(std::string(10000, '/'));
  EXPECT_LT(s.message().size(), 200u);
  EXPECT_NE(s.message().find("(10000 bytes)"), std::string::npos) << s.message();
}

// Strict readiness: before the startup scan has reached every model, the registry lists
// only some of them (or none), and "all listed models READY" must not read as ready.
TEST_F(RepositoryTest, NotReadyUntilTheRepositoryIsLoaded) {
  fs::create_directories(root_);
  auto repo = ModelRepository::Open(root_.string());
  ASSERT_TRUE(repo.ok()) << repo.status();
  ModelRegistry registry(std::move(*repo), ModelConfig{});
  Readiness before = CheckReadiness(registry);
  EXPECT_FALSE(before.ready);
  EXPECT_EQ(before.body, "loading the model repository\n");
  registry.LoadRepository();  // empty: nothing to load
  Readiness after = CheckReadiness(registry);
  EXPECT_TRUE(after.ready) << after.body;
  EXPECT_EQ(after.body, "ready\n");
}

TEST_F(RepositoryTest, AFailedModelKeepsTheServerNotReady) {
  Touch(root_ / "broken" / "1" / "model.onnx", "not onnx");
  auto repo = ModelRepository::Open(root_.string());
  ASSERT_TRUE(repo.ok()) << repo.status();
  ModelRegistry registry(std::move(*repo), ModelConfig{});
  registry.LoadRepository();
  Readiness r = CheckReadiness(registry);
  EXPECT_FALSE(r.ready);
  EXPECT_NE(r.body.find("broken version 1: FAILED"), std::string::npos) << r.body;
}

}  // namespace
}  // namespace kiln::server

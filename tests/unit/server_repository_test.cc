// The model repository on disk: scanning, versions, atomic stores, removal, names.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "server/http.h"
#include "server/model_registry.h"
#include "server/model_repository.h"

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

TEST(ModelName, Validation) {
  EXPECT_TRUE(ValidateModelName("resnet-50_v1.2").ok());
  EXPECT_FALSE(ValidateModelName("").ok());
  EXPECT_FALSE(ValidateModelName("..").ok());
  EXPECT_FALSE(ValidateModelName("a/b").ok());
  EXPECT_FALSE(ValidateModelName(".hidden").ok());
  EXPECT_FALSE(ValidateModelName(std::string(200, 'a')).ok());
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

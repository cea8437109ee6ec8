// The test-only broken pass: RegisterTestPass puts it into the pipeline, and the warm-up
// check catches it, bisects to it and disables it. Its own binary, because a registration
// lasts for the process.
#include <gtest/gtest.h>

#include <filesystem>

#include "compiler/onnx/importer.h"
#include "compiler/pipeline.h"
#include "server/common/test_faults.h"
#include "server/model/model_builder.h"

namespace kiln::server {
namespace {

TEST(TestFaults, RegisteredPassJoinsThePipelineAndIsRepairedByTheWarmupCheck) {
  ASSERT_TRUE(EnableTestFaults().ok());
  EXPECT_FALSE(EnableTestFaults().ok());  // registered once
  EXPECT_EQ(PipelinePasses(OptLevel::kO2).back(), kPerturbConstantPass);
  EXPECT_EQ(PipelinePasses(OptLevel::kO1).back(), kPerturbConstantPass);
  EXPECT_TRUE(PipelinePasses(OptLevel::kO0).empty());
  EXPECT_FALSE(RegisterTestPass("not_test", nullptr, "fold_constants").ok());

  const char* src = std::getenv("KILN_SOURCE_DIR");  // set by ctest
  if (!src) GTEST_SKIP() << "KILN_SOURCE_DIR is not set";
  auto graph = onnx_io::ImportModelFile(
      (std::filesystem::path(src) / "config/models/example/1/model.onnx").string());
  ASSERT_TRUE(graph.ok()) << graph.status();
  ModelConfig config;
  config.max_batch_size = 2;
  ASSERT_TRUE(FinalizeModelConfig(config).ok());
  auto built = BuildModel(**graph, config, nullptr);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_TRUE(built->check.ok);
  EXPECT_EQ(built->check.disabled_passes, std::set<std::string>{kPerturbConstantPass});
}

}  // namespace
}  // namespace kiln::server

// The server side of the CUDA backend against the real kilnd: a model configured for a GPU
// is FAILED with the reason on a machine without one (READY on a machine with one), while
// kilnd stays up and serves the other models. Also: device names in model configs and the
// engine cache's GPU fingerprint.
#include <gtest/gtest.h>

#include "runtime/cuda/cuda_engine.h"
#include "runtime/cuda/devices.h"
#include "server/model/engine_cache.h"
#include "server/model/engine_factory.h"
#include "server/model/model_config.h"
#include "tests/server/test_server.h"

namespace kiln::server::testing {
namespace {

void WriteModel(const fs::path& repo, const std::string& name, const std::string& config) {
  fs::create_directories(repo / name / "1");
  std::ofstream(repo / name / "1" / "model.onnx", std::ios::binary) << ExampleOnnx();
  std::ofstream(repo / name / "config.yaml") << config;
}

TEST(CudaServer, GpuModelFailsCleanlyWithoutAGpuAndTheRestServe) {
  TestServer s("cuda");
  WriteModel(s.repo(), "example", "device: reference\n");
  WriteModel(s.repo(), "gpu", "device: cuda:0\n");
  s.Start();
  const bool has_gpu = !cuda::ProbeCuda().gpus.empty();
  const v1::ModelState gpu_state = s.WaitLoaded("gpu", 120);
  v1::ModelInfo info;
  ASSERT_TRUE(s.GetModel("gpu", 0, &info).ok());
  EXPECT_EQ(info.device(), "cuda:0");
  if (has_gpu) {
    EXPECT_EQ(gpu_state, v1::MODEL_STATE_READY) << info.reason();
    EXPECT_TRUE(s.Predict("gpu", 8).ok());
  } else {
    EXPECT_EQ(gpu_state, v1::MODEL_STATE_FAILED);
    // The reason names the device and what is missing (no driver, no GPU, no CUDA build).
    EXPECT_NE(info.reason().find("cuda:0"), std::string::npos) << info.reason();
    std::printf("GPU model on this machine: FAILED: %s\n", info.reason().c_str());
    EXPECT_FALSE(s.Predict("gpu", 8).ok());
  }
  EXPECT_EQ(s.WaitLoaded("example"), v1::MODEL_STATE_READY);
  EXPECT_TRUE(s.Predict("example", 8).ok());
}

TEST(CudaServer, ModelConfigsNameGpusAsCudaN) {
  const ModelConfig base;
  for (const char* ok : {"cuda", "cuda:0", "cuda:7"}) {
    absl::StatusOr<ModelConfig> c = ParseModelConfig(absl::StrCat("device: ", ok, "\n"), base, "m");
    ASSERT_TRUE(c.ok()) << ok << ": " << c.status();
    EXPECT_EQ(c->device, ok);
  }
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "cuda:-1", "cuda0"}) {
    absl::StatusOr<ModelConfig> c = ParseModelConfig(absl::StrCat("device: '", bad, "'\n"), base, "m");
    EXPECT_TRUE(absl::IsInvalidArgument(c.status())) << bad;
    if (!c.ok()) {
      EXPECT_NE(c.status().message().find("cuda:N"), std::string::npos) << c.status();
    }
  }
}

TEST(CudaServer, EngineCacheKeysNameTheGpuAndItsSoftware) {
  const std::string fp = DeviceFingerprint("cuda:0");
  EXPECT_EQ(fp.rfind("cuda:0:", 0), 0u) << fp;
  EXPECT_NE(fp, DeviceFingerprint("cuda:1"));
  EXPECT_NE(fp, DeviceFingerprint("cpu"));
  const cuda::CudaReport& r = cuda::ProbeCuda();
  if (!r.gpus.empty()) {
    // name, compute capability, driver, runtime, cuDNN and cuBLAS all take part.
    EXPECT_NE(fp.find(r.gpus[0].name), std::string::npos) << fp;
    EXPECT_NE(fp.find("cudnn=" + r.cudnn), std::string::npos) << fp;
  }
}

}  // namespace
}  // namespace kiln::server::testing

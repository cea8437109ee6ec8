// SIGTERM while a model compiles and checks: kilnd must exit within its drain setting, not
// when the build ends by itself (a cold build of a large model takes minutes). The model is a
// chain of convolutions whose load (compile and warm-up check, device: reference) takes ~35
// seconds; the tests stop kilnd a moment into it.
#include <future>

#include "tests/server/test_server.h"

namespace kiln::server::testing {
namespace {

constexpr int kLayers = 250;           // ~35 s to load uncancelled on 2 cores
constexpr double kDrainSeconds = 2.0;  // TestServer's drain_timeout_ms

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(Shutdown, SigtermDuringStartupLoadingExitsWithinTheDrain) {
  TestServer s("stop_startup");
  fs::create_directories(s.repo() / "slow/1");
  std::ofstream(s.repo() / "slow/1/model.onnx") << ConvChainOnnx(kLayers, 64, 56);
  std::ofstream(s.repo() / "slow/config.yaml") << "max_batch_size: 1\n";
  s.Start();
  v1::ModelInfo info;
  ASSERT_TRUE(s.GetModel("slow", 0, &info).ok());
  std::this_thread::sleep_for(std::chrono::seconds(2));
  ASSERT_TRUE(s.GetModel("slow", 0, &info).ok());
  ASSERT_EQ(info.state(), v1::MODEL_STATE_LOADING) << "loaded too fast to be stopped";
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(s.Stop(), 0);
  const double took = SecondsSince(t0);
  std::printf("SIGTERM during start-up loading (%s): exit after %.2f s\n", info.reason().c_str(),
              took);
  EXPECT_LT(took, kDrainSeconds + 1.0);
  // The model comes back at the next start: a stopped load leaves the repository alone.
  EXPECT_TRUE(fs::exists(s.repo() / "slow/1/model.onnx"));
}

TEST(Shutdown, SigtermDuringAnUploadsBuildCancelsItAndExits) {
  TestServer s("stop_upload");
  s.Start();
  auto upload = std::async(std::launch::async, [&s] {
    return s.Upload({"slow", ConvChainOnnx(kLayers, 64, 56), 0, "max_batch_size: 1\n"});
  });
  std::this_thread::sleep_for(std::chrono::seconds(3));  // received, building
  ASSERT_EQ(upload.wait_for(std::chrono::seconds(0)), std::future_status::timeout)
      << "loaded too fast to be stopped";
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(s.Stop(), 0);
  const double took = SecondsSince(t0);
  const grpc::Status st = upload.get();
  std::printf("SIGTERM during an upload's build: exit after %.2f s; the upload got %d (%s)\n", took,
              st.error_code(), st.error_message().c_str());
  EXPECT_LT(took, kDrainSeconds + 1.0);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::CANCELLED) << st.error_message();
  // A cancelled upload was never seen to succeed: nothing of it stays.
  EXPECT_TRUE(s.RepoFiles().empty());
}

}  // namespace
}  // namespace kiln::server::testing

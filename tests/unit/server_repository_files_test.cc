// What the files of a model repository can do to kilnd when they are not what they should
// be: every reader refuses, at once, a path that is not a regular file (a FIFO blocked
// start-up forever); a start-up over broken models reaches the good ones and reports the
// broken ones without the server's own paths; and an upload loads exactly when its files
// would load after a restart.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <thread>

#include "base/file.h"
#include "compiler/onnx/importer.h"
#include "server/common/mapped_file.h"
#include "server/serving/model_registry.h"
#include "server/serving/readiness.h"

namespace kiln::server {
namespace {

namespace fs = std::filesystem;
using std::chrono::seconds;

// y = x + w, w two floats stored as external data at `location` (beside the model).
std::string AddModel(const std::string& location) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("add");
  for (auto [v, name] : {std::pair(g->add_input(), "x"), std::pair(g->add_output(), "y")}) {
    v->set_name(name);
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    tt->mutable_shape()->add_dim()->set_dim_value(2);
  }
  auto* w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(2);
  w->set_data_location(onnx::TensorProto::EXTERNAL);
  auto* loc = w->add_external_data();
  loc->set_key("location");
  loc->set_value(location);
  auto* n = g->add_node();
  n->set_op_type("Add");
  n->add_input("x");
  n->add_input("w");
  n->add_output("y");
  return m.SerializeAsString();
}

void Write(const fs::path& p, const std::string& bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << bytes;
}

// The kinds of file a repository path may name instead of a regular file.
void MakeFifo(const fs::path& p) { ASSERT_EQ(::mkfifo(p.c_str(), 0644), 0); }
void MakeSocket(const fs::path& p) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof a.sun_path, "%s", p.c_str());
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ::close(fd);  // the socket file stays
}
void MakeDirectory(const fs::path& p) { fs::create_directories(p); }

// Runs `f` on a thread; false when it has not returned within `limit`. A reader stuck on a
// FIFO is then released (a writer opens and closes it), so a failing test still ends.
bool ReturnsWithin(const std::function<void()>& f, seconds limit, const fs::path& fifo) {
  std::packaged_task<void()> task(f);
  auto done = task.get_future();
  std::thread t(std::move(task));
  const bool in_time = done.wait_for(limit) == std::future_status::ready;
  while (done.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
    const int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (w >= 0) ::close(w);
  }
  t.join();
  return in_time;
}

class RepositoryFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) /
            ("kiln_files_" +
             std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    root_ = fs::canonical(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  ModelConfig Defaults() const {
    ModelConfig c;
    c.device = "reference";
    c.warmup.enabled = false;
    return c;
  }
  fs::path root_;
};

// Every reader of the repository's files against every kind of file that is not regular:
// an error, within a second.
TEST_F(RepositoryFilesTest, EveryReaderRefusesWhatIsNotARegularFileAtOnce) {
  const std::vector<std::pair<const char*, std::function<void(const fs::path&)>>> kinds = {
      {"fifo", MakeFifo}, {"socket", MakeSocket}, {"directory", MakeDirectory}};
  const std::vector<std::pair<const char*, std::function<bool(const fs::path&)>>> readers = {
      {"ReadWholeFile", [](const fs::path& p) { return ReadWholeFile(p.string()).has_value(); }},
      {"MappedFile::Open", [](const fs::path& p) { return MappedFile::Open(p.string()).ok(); }},
      {"ImportModelFile",
       [](const fs::path& p) { return onnx_io::ImportModelFile(p.string()).ok(); }},
      {"external data",
       [](const fs::path& p) {
         onnx_io::ImportOptions options;
         options.model_dir = p.parent_path().string();
         return onnx_io::ImportModelBytes(AddModel(p.filename().string()), options).ok();
       }},
  };
  for (const auto& [kind, make] : kinds) {
    for (const auto& [reader, read] : readers) {
      const fs::path p = root_ / (std::string(kind) + "." + reader);
      make(p);
      bool ok = true;
      EXPECT_TRUE(ReturnsWithin([&] { ok = read(p); }, seconds(1), p))
          << reader << " on a " << kind;
      EXPECT_FALSE(ok) << reader << " read a " << kind;
    }
  }
}

// Start-up over a repository where some models' files are broken: it ends, the good model
// is READY, and what /readyz and the FAILED reasons say names no path of the server's.
TEST_F(RepositoryFilesTest, StartUpReachesEveryModelAndReportsRelativePaths) {
  Write(root_ / "a_fifo" / "1" / "model.onnx", AddModel("w.bin"));
  MakeFifo(root_ / "a_fifo" / "1" / "w.bin");
  Write(root_ / "b_missing" / "1" / "model.onnx", AddModel("w.bin"));
  Write(root_ / "c_not_onnx" / "1" / "model.onnx", "not onnx");
  Write(root_ / "d_ok" / "1" / "model.onnx", AddModel("w.bin"));
  Write(root_ / "d_ok" / "1" / "w.bin", std::string(8, '\0'));
  // A config that is not a file is not "no config" (the defaults): the model is skipped.
  Write(root_ / "e_fifo_config" / "1" / "model.onnx", AddModel("w.bin"));
  Write(root_ / "e_fifo_config" / "1" / "w.bin", std::string(8, '\0'));
  MakeFifo(root_ / "e_fifo_config" / "config.yaml");
  auto repo = ModelRepository::Open(root_.string());
  ASSERT_TRUE(repo.ok()) << repo.status();
  ModelRegistry registry(std::move(*repo), Defaults());
  EXPECT_TRUE(ReturnsWithin([&] { registry.LoadRepository(); }, seconds(20),
                            root_ / "a_fifo" / "1" / "w.bin"));
  auto ok = registry.Find("d_ok", std::nullopt);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)->state(), ModelState::kReady) << (*ok)->reason();
  for (const char* name : {"a_fifo", "b_missing", "c_not_onnx"}) {
    auto mv = registry.Find(name, std::nullopt);
    ASSERT_TRUE(mv.ok()) << name;
    EXPECT_EQ((*mv)->state(), ModelState::kFailed) << name;
    EXPECT_EQ((*mv)->reason().find(root_.string()), std::string::npos) << (*mv)->reason();
  }
  auto skipped = registry.Find("e_fifo_config", std::nullopt);
  EXPECT_FALSE(skipped.ok() && (*skipped)->state() == ModelState::kReady)
      << "loaded with the defaults instead of its config.yaml";
  const Readiness r = CheckReadiness(registry);
  EXPECT_EQ(r.body.find(root_.string()), std::string::npos) << r.body;
  // A path the server opened itself (a model file) comes back relative to the repository.
  const absl::Status s = registry.repository().RelativePaths(
      MappedFile::Open(registry.repository().ModelPath("gone", 1)).status());
  EXPECT_EQ(s.message().find(root_.string()), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(" gone/1/model.onnx"), std::string::npos) << s.message();
}

// An upload's answer must be what a restart finds: a model whose external data is a file
// the upload's folder holds only while it is staged (config.yaml) is refused at upload,
// rather than READY now and FAILED after a restart.
TEST_F(RepositoryFilesTest, AnUploadLoadsExactlyWhenItWouldAfterARestart) {
  const std::string config = "max_batch_size: 8\n# " + std::string(64, 'x') + "\n";
  for (const std::string location : {"config.yaml", "model.onnx", "commit", "w.bin"}) {
    SCOPED_TRACE(location);
    fs::remove_all(root_);
    fs::create_directories(root_);
    bool uploaded = false;
    {
      auto repo = ModelRepository::Open(root_.string());
      ASSERT_TRUE(repo.ok());
      ModelRegistry registry(std::move(*repo), Defaults());
      registry.LoadRepository();
      auto staged = registry.repository().Stage();
      ASSERT_TRUE(staged.ok()) << staged.status();
      ASSERT_TRUE((*staged)->Append(AddModel(location)).ok());
      ASSERT_TRUE((*staged)->Finish(config).ok());
      auto loaded = registry.LoadUpload("m", 1, std::move(*staged));
      uploaded = loaded.ok();
      if (!uploaded) {
        EXPECT_EQ(loaded.status().message().find(root_.string()), std::string::npos)
            << loaded.status().message();
      }
    }
    auto repo = ModelRepository::Open(root_.string());
    ASSERT_TRUE(repo.ok());
    for (const std::string& note : repo->Recover()) ADD_FAILURE() << note;
    ModelRegistry restarted(std::move(*repo), Defaults());
    restarted.LoadRepository();
    auto mv = restarted.Find("m", std::nullopt);
    const bool ready_after = mv.ok() && (*mv)->state() == ModelState::kReady;
    EXPECT_EQ(uploaded, ready_after) << (mv.ok() ? (*mv)->reason() : mv.status().ToString());
  }
}

}  // namespace
}  // namespace kiln::server

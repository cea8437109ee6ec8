// kilnd's server reflection, as grpcurl and ghz use it: list the services, then fetch the
// descriptors of InferenceService and rebuild its Predict signature from them alone.
#include <filesystem>
#include <fstream>

#include <set>

#include "absl/strings/str_cat.h"
#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "tests/server/free_port.h"
#include "tests/server/kilnd_process.h"

namespace kiln::server {
namespace {
namespace fs = std::filesystem;
namespace refl = grpc::reflection::v1alpha;

class Reflection : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(dir_ / "models");
    fs::copy(fs::path(std::getenv("KILN_SOURCE_DIR")) / "config/models/example", dir_ / "models/example",
             fs::copy_options::recursive);
    const Ports ports = StartOnFreePorts(kilnd_, [&](const Ports& p) {
      std::ofstream(dir_ / "server.yaml") << "server: {grpc_address: '127.0.0.1:" << p.grpc
                                          << "', http_address: '127.0.0.1:" << p.http
                                          << "'}\nmodel_repository: '" << (dir_ / "models").string()
                                          << "'\nlog: {level: warn}\n";
      return (dir_ / "server.yaml").string();
    });
    stub_ = refl::ServerReflection::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", ports.grpc), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    stub_.reset();
    EXPECT_EQ(kilnd_.Stop(), 0);
    fs::remove_all(dir_);
  }

  // One request on the bidirectional stream, one response back.
  refl::ServerReflectionResponse Ask(const refl::ServerReflectionRequest& req) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    auto stream = stub_->ServerReflectionInfo(&ctx);
    refl::ServerReflectionResponse resp;
    EXPECT_TRUE(stream->Write(req));
    EXPECT_TRUE(stream->Read(&resp));
    stream->WritesDone();
    EXPECT_TRUE(stream->Finish().ok());
    return resp;
  }

  fs::path dir_ = fs::path(::testing::TempDir()) / absl::StrCat("kilnd_reflection_", getpid());
  KilndProcess kilnd_;
  std::unique_ptr<refl::ServerReflection::Stub> stub_;
};

TEST_F(Reflection, ListsEveryService) {
  refl::ServerReflectionRequest req;
  req.set_list_services("");
  const auto resp = Ask(req);
  ASSERT_TRUE(resp.has_list_services_response()) << resp.DebugString();
  std::set<std::string> names;
  for (const auto& s : resp.list_services_response().service()) names.insert(s.name());
  for (const char* want : {"kiln.v1.InferenceService", "kiln.v1.ModelService", "grpc.health.v1.Health",
                           "grpc.reflection.v1alpha.ServerReflection"}) {
    EXPECT_TRUE(names.count(want)) << want;
  }
}

TEST_F(Reflection, DescriptorsRebuildPredictsSignature) {
  refl::ServerReflectionRequest req;
  req.set_file_containing_symbol("kiln.v1.InferenceService");
  const auto resp = Ask(req);
  ASSERT_TRUE(resp.has_file_descriptor_response()) << resp.DebugString();
  // The response carries the file and its imports; a pool built from them alone must resolve.
  std::vector<google::protobuf::FileDescriptorProto> files;
  for (const std::string& bytes : resp.file_descriptor_response().file_descriptor_proto()) {
    ASSERT_TRUE(files.emplace_back().ParseFromString(bytes));
  }
  google::protobuf::DescriptorPool pool;
  for (size_t built = 0, pass = 0; built < files.size() && pass < files.size(); ++pass) {
    for (const auto& f : files) {
      if (!pool.FindFileByName(f.name()) && pool.BuildFile(f)) ++built;
    }
  }
  const auto* service = pool.FindServiceByName("kiln.v1.InferenceService");
  ASSERT_NE(service, nullptr);
  const auto* predict = service->FindMethodByName("Predict");
  ASSERT_NE(predict, nullptr);
  EXPECT_EQ(predict->input_type()->full_name(), "kiln.v1.PredictRequest");
  EXPECT_NE(predict->input_type()->FindFieldByName("inputs"), nullptr);
  EXPECT_NE(service->FindMethodByName("BatchPredict"), nullptr);
}

TEST_F(Reflection, UnknownSymbolIsNotFound) {
  refl::ServerReflectionRequest req;
  req.set_file_containing_symbol("kiln.v1.NoSuchService");
  const auto resp = Ask(req);
  ASSERT_TRUE(resp.has_error_response()) << resp.DebugString();
  EXPECT_EQ(resp.error_response().error_code(), static_cast<int>(grpc::StatusCode::NOT_FOUND));
}

}  // namespace
}  // namespace kiln::server

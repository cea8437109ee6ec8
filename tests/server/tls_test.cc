// kilnd's gRPC port over TLS and mutual TLS: certificates made by openssl at test time, the
// real binary, real clients. Negative cases: a plaintext client, a client that trusts another
// CA, a client without a certificate under mTLS, and a key file that is not PEM.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "base/file.h"
#include "kiln/v1/inference.grpc.pb.h"
#include "kiln/v1/model.grpc.pb.h"
#include "server/serving/tensor_codec.h"
#include "tests/server/free_port.h"
#include "tests/server/kilnd_process.h"

namespace kiln::server {
namespace {
namespace fs = std::filesystem;

// The file's bytes, empty when it cannot be read (the assertions on them then fail).
std::string ReadFile(const fs::path& p) { return ReadWholeFile(p.string()).value_or(""); }

class Tls : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    fs::create_directories(Dir());
    // Self-signed: each certificate is its own CA. The server's names 127.0.0.1 for the
    // clients' host check.
    MakeCert("server", "/CN=localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1");
    MakeCert("client", "/CN=kiln-test-client", "");
    MakeCert("stranger", "/CN=localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1");
    const fs::path src = fs::path(std::getenv("KILN_SOURCE_DIR")) / "config/models/example";
    fs::create_directories(Dir() / "models");
    fs::copy(src, Dir() / "models" / "example", fs::copy_options::recursive);
  }
  static void TearDownTestSuite() { fs::remove_all(Dir()); }
  static fs::path Dir() { return fs::path(::testing::TempDir()) / absl::StrCat("kilnd_tls_", getpid()); }
  static void MakeCert(const std::string& name, const std::string& subject, const std::string& ext) {
    const fs::path d = Dir();
    std::string cmd = absl::StrCat("openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj '", subject,
                                   "' -keyout ", (d / (name + ".key")).string(), " -out ",
                                   (d / (name + ".pem")).string());
    if (!ext.empty()) cmd += absl::StrCat(" -addext '", ext, "'");
    ASSERT_EQ(std::system((cmd + " 2>/dev/null").c_str()), 0) << cmd;
  }

  // kilnd with the example model and the given tls section.
  void StartKilnd(const std::string& tls_yaml) {
    const fs::path models = Dir() / "models";
    const Ports ports = StartOnFreePorts(kilnd_, [&](const Ports& p) {
      const fs::path config = Dir() / "server.yaml";
      std::ofstream(config) << "server: {grpc_address: '127.0.0.1:" << p.grpc
                            << "', http_address: '127.0.0.1:" << p.http << "', tls: " << tls_yaml
                            << "}\nmodel_repository: '" << models.string() << "'\nlog: {level: warn}\n";
      return config.string();
    });
    grpc_port_ = ports.grpc;
    http_port_ = ports.http;
  }
  std::string Pem(const std::string& name) { return ReadFile(Dir() / name); }
  std::shared_ptr<grpc::Channel> Channel(const std::shared_ptr<grpc::ChannelCredentials>& creds) {
    return grpc::CreateChannel(absl::StrCat("127.0.0.1:", grpc_port_), creds);
  }
  std::shared_ptr<grpc::ChannelCredentials> TrustingServer(bool with_client_cert) {
    grpc::SslCredentialsOptions o;
    o.pem_root_certs = Pem("server.pem");
    if (with_client_cert) {
      o.pem_private_key = Pem("client.key");
      o.pem_cert_chain = Pem("client.pem");
    }
    return grpc::SslCredentials(o);
  }

  // GetModel until the example leaves LOADING (or the deadline passes); the last status.
  static grpc::Status WaitReady(const std::shared_ptr<grpc::Channel>& channel, int seconds = 60) {
    auto stub = v1::ModelService::NewStub(channel);
    grpc::Status s;
    for (int i = 0; i < seconds * 10; ++i) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
      v1::GetModelRequest req;
      req.set_name("example");
      v1::ModelInfo info;
      s = stub->GetModel(&ctx, req, &info);
      if (!s.ok() && s.error_code() != grpc::StatusCode::UNAVAILABLE) return s;
      if (s.ok() && info.state() == v1::MODEL_STATE_READY) return s;
      if (s.ok() && info.state() == v1::MODEL_STATE_FAILED) return grpc::Status(grpc::StatusCode::INTERNAL, "FAILED");
      if (!s.ok() && seconds == 0) return s;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return s;
  }
  static grpc::Status Predict(const std::shared_ptr<grpc::Channel>& channel) {
    v1::PredictRequest req;
    req.set_model("example");
    EncodeTensor(Tensor(DType::kFloat32, {1, 8}), false, &(*req.mutable_inputs())["x"]);
    v1::PredictResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(3));
    grpc::Status s = v1::InferenceService::NewStub(channel)->Predict(&ctx, req, &resp);
    if (s.ok() && resp.outputs().empty()) return grpc::Status(grpc::StatusCode::INTERNAL, "no outputs");
    return s;
  }

  KilndProcess kilnd_;
  int grpc_port_ = 0, http_port_ = 0;
};

TEST_F(Tls, ServesTrustingClientsAndRefusesOthers) {
  StartKilnd(absl::StrCat("{cert_file: '", (Dir() / "server.pem").string(), "', key_file: '",
                          (Dir() / "server.key").string(), "'}"));
  auto trusted = Channel(TrustingServer(false));
  ASSERT_TRUE(WaitReady(trusted).ok());
  EXPECT_TRUE(Predict(trusted).ok());
  // A plaintext client cannot speak to a TLS port.
  EXPECT_EQ(Predict(Channel(grpc::InsecureChannelCredentials())).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  // A client that trusts another CA rejects the server's certificate.
  grpc::SslCredentialsOptions other;
  other.pem_root_certs = Pem("stranger.pem");
  EXPECT_EQ(Predict(Channel(grpc::SslCredentials(other))).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(kilnd_.Stop(), 0);
}

TEST_F(Tls, MutualTlsNeedsAClientCertificateFromTheConfiguredCa) {
  StartKilnd(absl::StrCat("{cert_file: '", (Dir() / "server.pem").string(), "', key_file: '",
                          (Dir() / "server.key").string(), "', client_ca_file: '",
                          (Dir() / "client.pem").string(), "'}"));
  auto with_cert = Channel(TrustingServer(true));
  ASSERT_TRUE(WaitReady(with_cert).ok());
  EXPECT_TRUE(Predict(with_cert).ok());
  EXPECT_EQ(Predict(Channel(TrustingServer(false))).error_code(), grpc::StatusCode::UNAVAILABLE);
  // A certificate the configured CA did not sign.
  grpc::SslCredentialsOptions wrong;
  wrong.pem_root_certs = Pem("server.pem");
  wrong.pem_private_key = Pem("stranger.key");
  wrong.pem_cert_chain = Pem("stranger.pem");
  EXPECT_EQ(Predict(Channel(grpc::SslCredentials(wrong))).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(kilnd_.Stop(), 0);
}

TEST_F(Tls, AKeyFileThatIsNotPemStopsTheServerAtStart) {
  std::ofstream(Dir() / "garbage.key") << "not a key";
  StartKilnd(absl::StrCat("{cert_file: '", (Dir() / "server.pem").string(), "', key_file: '",
                          (Dir() / "garbage.key").string(), "'}"));
  EXPECT_EQ(kilnd_.Wait(), 1);
}

}  // namespace
}  // namespace kiln::server

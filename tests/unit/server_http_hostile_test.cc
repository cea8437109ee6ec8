// Requests an attacker sends to the HTTP port, through the real listener and routes
// (HttpServer over an empty registry): each row is the raw bytes and the status the server
// must answer, within a second. The rows where two readers of one request could disagree
// (the listener and cpp-httplib, a proxy and kilnd) must be refused, never read one way by
// one of them and another way by the other.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "server/http/http.h"
#include "server/serving/model_registry.h"
#include "tests/server/free_port.h"

namespace kiln::server {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

struct Row {
  const char* what;
  std::string request;
  int status;  // what the answer's status line must carry
};

std::string Post(const std::string& path, const std::string& headers, const std::string& body) {
  return "POST " + path + " HTTP/1.1\r\nHost: t\r\n" + headers +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

std::vector<Row> Rows() {
  const std::string infer = "/v2/models/m/infer";
  const std::string unload = "/v2/repository/models/m/unload";
  const std::string json = R"({"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1]}]})";
  return {
      // The listener read the last length and waited for 100000 bytes; cpp-httplib the first.
      {"conflicting Content-Length",
       "POST " + infer + " HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 100000\r\n\r\n{}", 400},
      {"Content-Length repeated with one value",
       Post(infer, "Content-Length: " + std::to_string(json.size()) + "\r\n", json), 404},
      // Read as the first (cpp-httplib's) this is a whole JSON request for an unknown model.
      {"duplicate Inference-Header-Content-Length",
       Post(infer,
            "Inference-Header-Content-Length: " + std::to_string(json.size()) +
                "\r\nInference-Header-Content-Length: 1\r\n",
            json),
       400},
      {"duplicate JSON member", Post(infer, "", R"({"inputs":[],"inputs":[]})"), 400},
      {"duplicate nested JSON member",
       Post(infer, "",
            R"({"inputs":[{"name":"x","name":"y","shape":[1],"datatype":"FP32","data":[1]}]})"),
       400},
      {"well-formed infer for a model that is not there", Post(infer, "", json), 404},
      // Auth schemes are case-insensitive (RFC 9110, 11.1): these reach the unload (404).
      {"bearer in lower case", Post(unload, "Authorization: bearer tok\r\n", ""), 404},
      {"BEARER with two spaces", Post(unload, "Authorization: BEARER  tok\r\n", ""), 404},
      {"a wrong token", Post(unload, "Authorization: Bearer tik\r\n", ""), 403},
      {"another scheme", Post(unload, "Authorization: Basic tok\r\n", ""), 403},
      {"no token", Post(unload, "", ""), 401},
  };
}

// The status of the server's answer to `request`, or 0 when none came within `wait`.
int StatusOf(int port, const std::string& request, milliseconds wait) {
  const int fd = ConnectLoopback(port);
  if (fd < 0) return -1;
  (void)!send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string answer;
  const auto until = std::chrono::steady_clock::now() + wait;
  char buf[512];
  while (answer.size() < 12 && std::chrono::steady_clock::now() < until) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 20) <= 0) continue;
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    answer.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  if (answer.size() < 12 || answer.rfind("HTTP/1.1 ", 0) != 0) return 0;
  return std::atoi(answer.substr(9, 3).c_str());
}

TEST(HostileHttp, EveryRowGetsItsStatusAtOnce) {
  const fs::path root = fs::path(::testing::TempDir()) / "kiln_http_hostile";
  fs::remove_all(root);
  auto repo = ModelRepository::Open(root.string());
  ASSERT_TRUE(repo.ok()) << repo.status();
  ModelRegistry registry(std::move(*repo), ModelConfig{});
  registry.LoadRepository();
  HttpOptions options;
  options.auth_token = "tok";
  const int port = FreePort();
  auto server = HttpServer::Start("127.0.0.1:" + std::to_string(port), registry, options);
  ASSERT_TRUE(server.ok()) << server.status();
  for (const Row& row : Rows()) {
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(StatusOf(port, row.request, milliseconds(1500)), row.status) << row.what;
    EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(1000)) << row.what;
  }
  (*server)->Stop();
  fs::remove_all(root);
}

}  // namespace
}  // namespace kiln::server

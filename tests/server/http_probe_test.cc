// Slow HTTP clients against the real kilnd: before, eight connections each sending a header
// line every ~4.5 s held all of cpp-httplib's threads and /healthz, /readyz and /metrics timed
// out for as long as they lasted (a liveness probe would restart the pod). Now requests are
// admitted whole, so 64 such clients (reconnecting whenever the server drops them) leave the
// probes answering.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>

#include "tests/server/test_server.h"
#include "tests/server/free_port.h"

namespace kiln::server::testing {
namespace {

using std::chrono::milliseconds;

// One slow client: a request line, then a header line every `every`, forever; a new
// connection whenever the server closes this one. Counts the server's closes.
void Slowloris(int port, milliseconds every, const std::atomic<bool>& stop,
               std::atomic<int>& dropped) {
  int fd = -1;
  while (!stop) {
    if (fd < 0) {
      fd = ConnectLoopback(port);
      if (fd < 0 || send(fd, "GET /healthz HTTP/1.1\r\n", 23, MSG_NOSIGNAL) < 0) continue;
    }
    std::this_thread::sleep_for(every);
    if (send(fd, "X-Slow: 1\r\n", 11, MSG_NOSIGNAL) < 0) {
      ++dropped;
      close(fd);
      fd = -1;
    }
  }
  if (fd >= 0) close(fd);
}

TEST(HttpProbes, AnswerWhileSixtyFourSlowClientsDribbleHeaders) {
  TestServer s("probes");
  s.Start();
  ASSERT_TRUE(s.WaitReady(10));  // the (empty) repository scanned
  std::atomic<bool> stop{false};
  std::atomic<int> dropped{0};
  std::vector<std::thread> slow;
  for (int i = 0; i < 64; ++i) {
    slow.emplace_back(Slowloris, s.http_port(), milliseconds(400), std::cref(stop),
                      std::ref(dropped));
  }
  std::this_thread::sleep_for(milliseconds(300));
  std::vector<double> ms;
  int failed = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (int i = 0; std::chrono::steady_clock::now() < until; ++i) {
    httplib::Client http("127.0.0.1", s.http_port());
    http.set_connection_timeout(1, 0);
    http.set_read_timeout(1, 0);
    const char* path = i % 3 == 0 ? "/healthz" : i % 3 == 1 ? "/readyz" : "/metrics";
    const auto t0 = std::chrono::steady_clock::now();
    auto r = http.Get(path);
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    if (!r || r->status != 200) ++failed;
    std::this_thread::sleep_for(milliseconds(50));
  }
  stop = true;
  for (auto& t : slow) t.join();
  std::sort(ms.begin(), ms.end());
  std::printf(
      "probes under 64 slow clients: %zu probes, %d failed, p50 %.1f ms, p99 %.1f ms, "
      "max %.1f ms; slow connections dropped by the server: %d\n",
      ms.size(), failed, ms[ms.size() / 2], ms[ms.size() * 99 / 100], ms.back(), dropped.load());
  EXPECT_EQ(failed, 0);
  EXPECT_LT(ms[ms.size() * 99 / 100], 500.0);
  // Each slow connection is dropped after the 2 s request timeout: over ~5 s, 64 clients.
  EXPECT_GE(dropped.load(), 64);
}

}  // namespace
}  // namespace kiln::server::testing

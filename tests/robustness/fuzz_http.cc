// libFuzzer target: the HTTP port's own reading of a request, before cpp-httplib sees it
// (server/http/http_listener.h ParseRequestHead: where the head ends, the body's length, the
// lane) and the bearer rule (server/common/auth.h CheckBearer). Built by run_fuzz.sh (--target
// http).
//
// Properties: never a crash; a request admitted as complete or waiting holds a head and a
// body that fit the bytes and the limits; every Content-Length line of an admitted head
// carries the length the listener waits for (cpp-httplib reads the first one: a listener
// reading another would wait for bytes the handler never reads); growing the bytes never
// changes a verdict other than "incomplete"; CheckBearer accepts exactly "bearer" in any
// case, spaces, and the token.
#include <cctype>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "server/common/auth.h"
#include "server/http/http_listener.h"

namespace {

using kiln::server::HttpLimits;
using kiln::server::ParseRequestHead;
using kiln::server::RequestHead;
using kiln::server::RequestState;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "fuzz_http: %s\n", what.c_str());
  std::abort();
}

bool IsContentLength(std::string_view line) {
  static constexpr std::string_view kName = "content-length:";
  if (line.size() < kName.size()) return false;
  for (size_t i = 0; i < kName.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(line[i])) != kName[i]) return false;
  }
  return true;
}

// Every Content-Length of the head, read as cpp-httplib would read the first.
void CheckLengths(std::string_view bytes, const RequestHead& h) {
  std::string_view head = bytes.substr(0, h.head_bytes);
  head.remove_prefix(std::min(head.size(), head.find('\n') + 1));
  while (!head.empty()) {
    const size_t nl = head.find('\n');
    std::string_view line = head.substr(0, nl);
    head.remove_prefix(nl == std::string_view::npos ? head.size() : nl + 1);
    if (!IsContentLength(line)) continue;
    line.remove_prefix(15);
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    while (!line.empty() && (line.back() == ' ' || line.back() == '\t' || line.back() == '\r'))
      line.remove_suffix(1);
    size_t n = 0;
    auto [ptr, ec] = std::from_chars(line.data(), line.data() + line.size(), n);
    if (ec != std::errc() || ptr != line.data() + line.size() || n != h.body_bytes) {
      Fail("an admitted head has a Content-Length other than the one waited for");
    }
  }
}

void CheckHead(std::string_view bytes, const HttpLimits& limits) {
  const RequestHead h = ParseRequestHead(bytes, limits);
  if (h.state == RequestState::kComplete || (h.state == RequestState::kIncomplete && h.head_done)) {
    if (!h.head_done || h.head_bytes > bytes.size() || h.head_bytes > limits.max_request_bytes)
      Fail("head beyond the bytes or the limit");
    const size_t max_body =
        kiln::server::IsApiLane(h.lane) ? limits.max_body_bytes : limits.max_request_bytes;
    if (h.body_bytes > max_body) Fail("body beyond its lane's limit");
    const bool whole = bytes.size() - h.head_bytes >= h.body_bytes;
    if (whole != (h.state == RequestState::kComplete)) Fail("complete disagrees with the sizes");
    CheckLengths(bytes, h);
  }
  // More bytes after a verdict other than "incomplete" never change it.
  if (h.state != RequestState::kIncomplete) {
    const std::string more = std::string(bytes) + "\r\n\r\nContent-Length: 1\r\n\r\n";
    if (ParseRequestHead(more, limits).state != h.state) Fail("a verdict changed with more bytes");
  }
}

void CheckBearerRule(std::string_view header) {
  static const std::string kToken = "t0k";
  const bool ok = kiln::server::CheckBearer(kToken, header).ok();
  const size_t sp = header.find(' ');
  bool expected = sp == 6;
  for (size_t i = 0; expected && i < 6; ++i) {
    expected = std::tolower(static_cast<unsigned char>(header[i])) == "bearer"[i];
  }
  if (expected) {
    std::string_view rest = header.substr(sp);
    while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
    expected = rest == kToken;
  }
  if (ok != expected) Fail("CheckBearer: " + std::string(header));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  HttpLimits limits;
  limits.max_request_bytes = 1024;  // small, so that the fuzzer reaches the limits
  limits.max_body_bytes = 4096;
  CheckHead(bytes, limits);
  CheckBearerRule(bytes.substr(0, 64));
  return 0;
}

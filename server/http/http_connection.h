// The connection a route handler runs on, for a response the handler writes itself in parts
// (a generation's Server-Sent Events). cpp-httplib's own chunked writer only runs inside its
// accept loop, which kilnd replaces with HttpListener (server/http/http.h), so a streaming route
// writes its head and chunks here and then takes the connection over: whatever cpp-httplib
// writes after the handler returns is dropped.
#pragma once

#include <string_view>

namespace kiln::server {

class HttpConnection {
 public:
  virtual ~HttpConnection() = default;
  // Writes all of `bytes` within the write timeout; false when the client is gone or stalled.
  virtual bool Write(std::string_view bytes) = 0;
  // From now on the response is the handler's: later writes by the router are dropped.
  virtual void TakeOver() = 0;
};

// The connection of the request this thread is handling; null outside an HTTP handler.
HttpConnection* CurrentHttpConnection();

// Makes `c` the current connection for its lifetime (the HTTP server, around routing).
class ScopedHttpConnection {
 public:
  explicit ScopedHttpConnection(HttpConnection* c);
  ~ScopedHttpConnection();
  ScopedHttpConnection(const ScopedHttpConnection&) = delete;
  ScopedHttpConnection& operator=(const ScopedHttpConnection&) = delete;

 private:
  HttpConnection* outer_;
};

}  // namespace kiln::server

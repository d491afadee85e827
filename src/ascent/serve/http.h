// An HTTP/1.1 server on Boost.Beast and Asio: keep-alive connections, whole and streamed (chunked) responses, body
// and time limits, and word of a client that leaves before its response ends. One I/O thread runs every connection,
// so handlers and the callbacks they post never race each other. Beast and Asio stay inside http.cc.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ascent::serve {

using Headers = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // as sent, query included
  std::string path;    // the target without its query
  Headers headers;
  std::string body;
  std::string peer;  // the client's address
  // The first header of that name (case-insensitive), or "".
  std::string header(std::string_view name) const;
};

struct HttpLimits {
  uint64_t max_body = 8 << 20;    // bytes; a larger body is refused with 413 (from Content-Length when it is sent)
  double idle_timeout_s = 60;     // a keep-alive connection waiting this long for a request is closed
  double request_timeout_s = 60;  // a request must arrive whole within this long of its first byte
  double write_timeout_s = 60;    // a response write that makes no progress for this long drops the client
  // The body of an error the server itself answers (bad HTTP, 413, 408): status and message in, JSON out.
  std::function<std::string(int status, const std::string& message)> error_body;
};

// One request's response. Every method runs on the I/O thread (post() gets there from any other).
class Exchange {
 public:
  virtual ~Exchange() = default;
  // The whole response; ends the exchange.
  virtual void send(int status, std::string_view content_type, std::string body, const Headers& extra = {}) = 0;
  // A streamed response: the header now, then write() pieces, then finish().
  virtual void start_stream(int status, std::string_view content_type, const Headers& extra = {}) = 0;
  virtual void write(std::string data) = 0;
  virtual void finish() = 0;
  // fn runs once, on the I/O thread, when the client closes or resets the connection (or a write to it fails)
  // before the response ended. Writes after that are dropped.
  virtual void on_gone(std::function<void()> fn) = 0;
  virtual bool gone() const = 0;
  // Runs fn on the I/O thread; callable from any thread.
  virtual void post(std::function<void()> fn) = 0;
};

using HttpHandler = std::function<void(const HttpRequest&, std::shared_ptr<Exchange>)>;

class HttpServer {
 public:
  // Binds and listens on host:port (port 0: a free one); throws Error naming the address when it cannot.
  HttpServer(const std::string& host, uint16_t port, HttpLimits limits, HttpHandler handler);
  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  uint16_t port() const;
  // Starts accepting on the I/O thread. on_signal runs there on SIGINT or SIGTERM.
  void start(std::function<void(int)> on_signal);
  // Stops accepting; idle connections close now, busy ones after their response. Callable from any thread.
  void stop_accepting();
  // Exchanges whose response has not ended yet or is not yet written whole.
  int64_t busy() const;
  // Runs fn on the I/O thread; callable from any thread.
  void post(std::function<void()> fn);
  // Closes every connection and joins the I/O thread.
  void stop();

  struct Impl;  // the Asio state; public only so that http.cc's connections can name it

 private:
  std::unique_ptr<Impl> impl_;
};

// The reason phrase of an HTTP status ("Not Found").
std::string_view status_reason(int status);

}  // namespace ascent::serve

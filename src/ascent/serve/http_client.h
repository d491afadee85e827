// The client side of HTTP/1.1 and Server-Sent Events, as a load generator or a test of a server needs them: URLs, one
// request on its own connection whose body is handed over as it arrives, and an SSE parser. Built on Boost.Beast;
// requests are coroutines, so one thread runs many at once.
#pragma once

#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ascent::serve {

struct Url {
  std::string text;  // as given
  std::string host;  // a name or an address; an IPv6 address without its brackets
  std::string port;  // "80" where the URL names none
  std::string path;  // "" where the URL names none
};

// Parses http://HOST[:PORT][/PATH]. Anything else (https, a port out of range, no host) throws ascent::Error naming
// `flag` and the URL.
Url parse_url(std::string_view text, std::string_view flag);

struct HttpRequest {
  std::string method = "GET";  // GET or POST
  std::string target;          // the path and query, from "/"
  std::string body;            // sent as application/json when not empty
  std::vector<std::pair<std::string, std::string>> headers;
};

// Sends `request` to url's host and port on a new connection. The response body goes to on_body piece by piece as
// it arrives, chunked transfer decoded, with the response's HTTP status; the result is that status. `idle` bounds each
// wait: for the connection, for the response to start, and between pieces of it. Failures (connection refused, a
// timeout, a malformed response) throw ascent::Error with a short cause, which the caller prefixes with what it asked
// for.
boost::asio::awaitable<int> http_request(const Url& url, const HttpRequest& request, std::chrono::milliseconds idle,
                                         const std::function<void(int status, std::string_view bytes)>& on_body);

// Splits a text/event-stream into events, fed bytes as they arrive in pieces of any size. An event is the lines up
// to a blank line: its `data:` lines joined by "\n", its `event:` name. Comment lines (":") and other fields are
// skipped; lines end in "\n", "\r\n" or "\r", as the SSE specification allows.
class SseParser {
 public:
  struct Event {
    std::string name;  // "" where no `event:` line named it
    std::string data;
  };
  // Appends the events these bytes complete to `out`.
  void feed(std::string_view bytes, std::vector<Event>& out);
  // True when bytes of an event not yet ended by a blank line are pending.
  bool pending() const { return !line_.empty() || has_data_ || !name_.empty(); }

 private:
  void line(std::vector<Event>& out);
  std::string line_, data_, name_;
  bool has_data_ = false, after_cr_ = false;
};

}  // namespace ascent::serve

#include "ascent/serve/http_client.h"

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <array>
#include <cctype>

#include "ascent/base/error.h"

namespace ascent::serve {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

Url parse_url(std::string_view text, std::string_view flag) {
  Url u;
  u.text = std::string(text);
  auto bad = [&](std::string_view why) { fail("{} {}: {}", flag, text, why); };
  std::string lower(text.substr(0, std::min<size_t>(text.size(), 8)));
  std::ranges::transform(lower, lower.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower.starts_with("https://")) bad("https is not supported, only http://");
  if (!lower.starts_with("http://")) bad("expected http://HOST[:PORT][/PATH]");
  std::string_view rest = text.substr(7);
  const size_t end = std::min(rest.find_first_of("/?#"), rest.size());
  std::string_view authority = rest.substr(0, end);
  u.path = std::string(rest.substr(end));
  if (u.path.find_first_of("?#") != std::string::npos) bad("a query or fragment is not supported");
  if (authority.find('@') != std::string_view::npos) bad("user info (USER@HOST) is not supported");
  std::string_view port;
  if (authority.starts_with('[')) {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) bad("an IPv6 address needs its closing ']'");
    u.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty() && !after.starts_with(':')) bad("expected ':PORT' after the IPv6 address");
    if (!after.empty()) port = after.substr(1);
    if (after == ":") bad("an empty port");
  } else {
    const size_t colon = authority.find(':');
    u.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) {
      port = authority.substr(colon + 1);
      if (port.empty()) bad("an empty port");
    }
  }
  if (u.host.empty()) bad("no host");
  if (!port.empty()) {
    const bool digits = port.size() <= 5 && std::ranges::all_of(port, [](char c) { return c >= '0' && c <= '9'; });
    if (!digits || std::stoi(std::string(port)) < 1 || std::stoi(std::string(port)) > 65535) {
      bad(fmt::format("port '{}' is not a number from 1 to 65535", port));
    }
  }
  u.port = port.empty() ? "80" : std::string(port);
  return u;
}

namespace {

// A system error's message as a cause: "connection refused", not "Connection refused [system:111 at ...]".
std::string cause(const boost::system::error_code& ec) {
  if (ec == beast::error::timeout) return "timed out";
  std::string m = ec.message();
  if (!m.empty()) m[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(m[0])));
  return m;
}

}  // namespace

asio::awaitable<int> http_request(const Url& url, const HttpRequest& request, std::chrono::milliseconds idle,
                                  const std::function<void(int status, std::string_view bytes)>& on_body) {
  auto ex = co_await asio::this_coro::executor;
  boost::system::error_code ec;
  auto step = asio::redirect_error(asio::use_awaitable, ec);
  tcp::resolver resolver(ex);
  const auto endpoints = co_await resolver.async_resolve(url.host, url.port, step);
  if (ec) fail("cannot resolve {}: {}", url.host, cause(ec));
  beast::tcp_stream stream(ex);
  stream.expires_after(idle);
  co_await stream.async_connect(endpoints, step);
  if (ec) fail("cannot connect to {}:{}: {}", url.host, url.port, cause(ec));

  http::request<http::string_body> req(request.method == "POST" ? http::verb::post : http::verb::get,
                                       request.target.empty() ? "/" : request.target, 11);
  const bool v6 = url.host.find(':') != std::string::npos;
  req.set(http::field::host, fmt::format("{}{}{}:{}", v6 ? "[" : "", url.host, v6 ? "]" : "", url.port));
  req.set(http::field::user_agent, "ascent");
  for (const auto& [name, value] : request.headers) req.set(name, value);
  if (!request.body.empty()) {
    req.set(http::field::content_type, "application/json");
    req.body() = request.body;
  }
  req.prepare_payload();
  stream.expires_after(idle);
  co_await http::async_write(stream, req, step);
  if (ec) fail("sending the request: {}", cause(ec));

  // The body is read into a fixed buffer, piece by piece, so each piece reaches on_body as soon as it arrives.
  beast::flat_buffer buffer;
  http::response_parser<http::buffer_body> parser;
  parser.body_limit(boost::none);
  stream.expires_after(idle);
  co_await http::async_read_header(stream, buffer, parser, step);
  if (ec) fail("reading the response: {}", cause(ec));
  const int status = static_cast<int>(parser.get().result_int());
  std::array<char, 16384> piece;
  while (!parser.is_done()) {
    parser.get().body().data = piece.data();
    parser.get().body().size = piece.size();
    stream.expires_after(idle);
    co_await http::async_read_some(stream, buffer, parser, step);
    if (ec == http::error::need_buffer) ec = {};
    if (ec) fail("reading the response body: {}", cause(ec));
    const size_t got = piece.size() - parser.get().body().size;
    if (got > 0) on_body(status, std::string_view(piece.data(), got));
  }
  stream.socket().shutdown(tcp::socket::shutdown_both, ec);
  co_return status;
}

void SseParser::feed(std::string_view bytes, std::vector<Event>& out) {
  for (const char c : bytes) {
    if (after_cr_) {
      after_cr_ = false;
      if (c == '\n') continue;  // the "\n" of a "\r\n"
    }
    if (c == '\r' || c == '\n') {
      after_cr_ = c == '\r';
      line(out);
      line_.clear();
    } else {
      line_ += c;
    }
  }
}

void SseParser::line(std::vector<Event>& out) {
  if (line_.empty()) {
    if (has_data_) out.push_back({std::move(name_), std::move(data_)});
    data_.clear();
    name_.clear();
    has_data_ = false;
    return;
  }
  if (line_[0] == ':') return;
  const size_t colon = line_.find(':');
  const std::string_view field = std::string_view(line_).substr(0, colon);
  std::string_view value = colon == std::string::npos ? std::string_view() : std::string_view(line_).substr(colon + 1);
  if (value.starts_with(' ')) value.remove_prefix(1);
  if (field == "data") {
    if (has_data_) data_ += '\n';
    data_ += value;
    has_data_ = true;
  } else if (field == "event") {
    name_ = std::string(value);
  }
}

}  // namespace ascent::serve

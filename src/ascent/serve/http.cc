#include "ascent/serve/http.h"

#include <fmt/format.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <csignal>
#include <deque>
#include <list>
#include <optional>
#include <thread>

#include "ascent/base/error.h"

namespace ascent::serve {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = net::ip::tcp;

namespace {

// Bytes of pipelined requests kept while a response is in progress; past it the connection stops reading until then.
constexpr size_t kMaxPipelined = 1 << 20;
constexpr size_t kHeaderLimit = 64 << 10;
// How long a connection being closed after an error keeps reading (and dropping) what the client still sends, so
// the client sees the error response rather than a reset.
constexpr double kLingerSeconds = 2;

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  }
  return true;
}

std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}

}  // namespace

std::string HttpRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (iequals(k, name)) return v;
  }
  return {};
}

std::string_view status_reason(int status) {
  const auto r = bhttp::obsolete_reason(static_cast<bhttp::status>(status));
  return {r.data(), r.size()};
}

class Session;

struct HttpServer::Impl {
  net::io_context ioc{1};
  tcp::acceptor acceptor{ioc};
  net::signal_set signals{ioc};
  net::steady_timer accept_retry{ioc};
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  HttpLimits limits;
  HttpHandler handler;
  std::thread thread;
  std::atomic<int64_t> busy{0};
  std::atomic<int64_t> unflushed{0};           // connections whose finished response is still being written
  bool accepting = true;                       // I/O thread only
  std::list<std::weak_ptr<Session>> sessions;  // I/O thread only
  std::function<void(int)> on_signal;

  void accept();
  void wait_signal();
  void close_idle_sessions();
};

class ExchangeImpl;

// One connection: reads requests one after another, hands each to the handler, writes its response, and meanwhile
// keeps a read open so that a client closing the connection is noticed at once.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(HttpServer::Impl& srv, tcp::socket sock)
      : srv_(srv), sock_(std::move(sock)), read_timer_(srv.ioc), write_timer_(srv.ioc) {
    beast::error_code ec;
    const auto ep = sock_.remote_endpoint(ec);
    if (!ec) peer_ = ep.address().to_string() + ":" + std::to_string(ep.port());
  }

  void start() {
    arm_read_timer(srv_.limits.idle_timeout_s);
    read_some();
  }

  // Called at shutdown: an idle connection closes now, a busy one after its response.
  void drain() {
    if (!in_exchange_) close();
  }

  // ExchangeImpl's side.
  void queue(std::string s);
  void end_exchange();
  bool closed() const { return closed_; }
  bool keep_alive() const { return keep_alive_ && srv_.accepting; }
  bool http10() const { return http10_; }
  void post(std::function<void()> fn) { net::post(srv_.ioc, std::move(fn)); }

 private:
  void read_some();
  void on_read_some(beast::error_code ec, size_t n);
  void read_request();
  void on_header(beast::error_code ec);
  void on_body(beast::error_code ec);
  void fail_read(beast::error_code ec);
  void dispatch();
  void do_write();
  void on_write(beast::error_code ec);
  void after_response();
  void flushed();  // the finished response is written (or the connection closed)
  void client_gone();
  void reject(int status, const std::string& message);
  void linger_close();
  void close();
  void arm_read_timer(double s);
  void disarm_read_timer() {
    ++read_gen_;
    read_timer_.cancel();
  }

  HttpServer::Impl& srv_;
  tcp::socket sock_;
  beast::flat_buffer buf_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  net::steady_timer read_timer_, write_timer_;
  uint64_t read_gen_ = 0, write_gen_ = 0;
  std::string peer_;
  std::deque<std::string> out_;
  std::shared_ptr<ExchangeImpl> current_;
  bool reading_ = false, writing_ = false;
  bool in_request_ = false;   // between a request's first byte and its end
  bool in_exchange_ = false;  // from dispatch until the response is written
  bool exchange_over_ = false;
  bool keep_alive_ = true, http10_ = false;
  bool timed_out_ = false, resume_pipelined_ = false;
  bool closed_ = false, lingering_ = false, gone_ = false;
  bool flush_counted_ = false;  // counted in srv_.unflushed
  bool peer_eof_ = false;       // the client shut its side; it may still read the response

  friend class ExchangeImpl;
};

class ExchangeImpl : public Exchange {
 public:
  explicit ExchangeImpl(std::shared_ptr<Session> s) : s_(std::move(s)) {}

  void send(int status, std::string_view content_type, std::string body, const Headers& extra) override {
    if (ended_) return;
    std::string msg = head(status, content_type, extra, fmt::format("Content-Length: {}\r\n", body.size()));
    msg += body;
    s_->queue(std::move(msg));
    end();
  }

  void start_stream(int status, std::string_view content_type, const Headers& extra) override {
    if (ended_ || streaming_) return;
    streaming_ = true;
    // HTTP/1.0 has no chunked encoding: the body then ends when the connection does.
    chunked_ = !s_->http10();
    s_->queue(head(status, content_type, extra, chunked_ ? "Transfer-Encoding: chunked\r\n" : "", !chunked_));
  }

  void write(std::string data) override {
    if (ended_ || !streaming_ || data.empty()) return;
    s_->queue(chunked_ ? fmt::format("{:x}\r\n{}\r\n", data.size(), data) : std::move(data));
  }

  void finish() override {
    if (ended_) return;
    if (streaming_ && chunked_) s_->queue("0\r\n\r\n");
    end();
  }

  void on_gone(std::function<void()> fn) override { gone_fn_ = std::move(fn); }
  bool gone() const override { return gone_; }
  bool streaming() const { return streaming_; }
  void post(std::function<void()> fn) override { s_->post(std::move(fn)); }

  // The session's side: the client left before the response ended.
  void mark_gone() {
    if (gone_ || ended_) return;
    gone_ = true;
    if (auto fn = std::move(gone_fn_)) fn();
  }

 private:
  std::string head(int status, std::string_view content_type, const Headers& extra, std::string_view length,
                   bool force_close = false) {
    close_ = force_close || !s_->keep_alive();
    std::string h = fmt::format("HTTP/1.1 {} {}\r\nServer: ascent\r\nContent-Type: {}\r\n{}Connection: {}\r\n", status,
                                status_reason(status), content_type, length, close_ ? "close" : "keep-alive");
    for (const auto& [k, v] : extra) h += k + ": " + v + "\r\n";
    return h + "\r\n";
  }

  void end() {
    ended_ = true;
    gone_fn_ = nullptr;
    if (close_) s_->keep_alive_ = false;
    s_->end_exchange();
  }

  std::shared_ptr<Session> s_;
  std::function<void()> gone_fn_;
  bool ended_ = false, streaming_ = false, chunked_ = false, gone_ = false, close_ = false;
};

void Session::arm_read_timer(double s) {
  const uint64_t gen = ++read_gen_;
  read_timer_.expires_after(seconds(s));
  read_timer_.async_wait([self = shared_from_this(), gen](beast::error_code ec) {
    if (ec || gen != self->read_gen_ || self->closed_) return;
    self->timed_out_ = true;
    beast::error_code ignored;
    self->sock_.cancel(ignored);
  });
}

void Session::read_some() {
  reading_ = true;
  sock_.async_read_some(buf_.prepare(16 << 10),
                        [self = shared_from_this()](beast::error_code ec, size_t n) { self->on_read_some(ec, n); });
}

void Session::on_read_some(beast::error_code ec, size_t n) {
  reading_ = false;
  if (lingering_) {
    if (ec) {
      close();
    } else {
      buf_.consume(buf_.size());
      read_some();
    }
    return;
  }
  if (ec == net::error::operation_aborted && resume_pipelined_ && !closed_) {
    resume_pipelined_ = false;
    read_request();
    return;
  }
  if (ec) {
    if (!in_exchange_) return close();
    // An orderly close during a stream may be a half-close by a client still reading: the stream goes on, and a
    // write to a client that closed altogether fails and ends it then. So does a response that has ended and is only
    // being flushed: closing now would cut it short. Whole responses still being computed are cancelled at once.
    if (ec == net::error::eof && (exchange_over_ || (current_ && current_->streaming()))) {
      peer_eof_ = true;
      return;
    }
    return client_gone();
  }
  buf_.commit(n);
  if (in_exchange_) {
    if (buf_.size() < kMaxPipelined) read_some();
    return;
  }
  read_request();
}

void Session::read_request() {
  if (closed_) return;
  parser_.emplace();
  parser_->header_limit(kHeaderLimit);
  parser_->body_limit(srv_.limits.max_body);
  in_request_ = true;
  arm_read_timer(srv_.limits.request_timeout_s);
  reading_ = true;
  bhttp::async_read_header(sock_, buf_, *parser_,
                           [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
}

void Session::on_header(beast::error_code ec) {
  reading_ = false;
  if (ec) return fail_read(ec);
  const auto length = parser_->content_length();
  if (length && *length > srv_.limits.max_body) {
    return reject(413, fmt::format("the request body of {} bytes is over the limit of {} bytes (--max-body)", *length,
                                   srv_.limits.max_body));
  }
  if (iequals(std::string_view(parser_->get()[bhttp::field::expect]), "100-continue")) {
    queue("HTTP/1.1 100 Continue\r\n\r\n");
  }
  reading_ = true;
  bhttp::async_read(sock_, buf_, *parser_,
                    [self = shared_from_this()](beast::error_code e, size_t) { self->on_body(e); });
}

void Session::on_body(beast::error_code ec) {
  reading_ = false;
  if (ec) return fail_read(ec);
  disarm_read_timer();
  in_request_ = false;
  dispatch();
}

void Session::fail_read(beast::error_code ec) {
  if (closed_) return;
  if (ec == bhttp::error::body_limit) {
    return reject(413,
                  fmt::format("the request body is over the limit of {} bytes (--max-body)", srv_.limits.max_body));
  }
  if (ec == bhttp::error::header_limit) return reject(431, "the request's header is too large");
  if (timed_out_) {
    // A request starts with its first byte (read before read_request), so in_request_ means part of one came.
    if (in_request_) return reject(408, "the request did not arrive in time (--request-timeout)");
    return close();
  }
  // A parse error is the client's fault and gets an answer; a closed or reset connection (end_of_stream before a
  // request, partial_message within one, or a socket error) has nobody to answer.
  const bool parse_error = ec.category() == bhttp::make_error_code(bhttp::error::bad_target).category() &&
                           ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message;
  if (!parse_error) return close();
  reject(400, fmt::format("malformed HTTP request: {}", ec.message()));
}

void Session::reject(int status, const std::string& message) {
  disarm_read_timer();
  in_request_ = false;
  keep_alive_ = false;
  const std::string body = srv_.limits.error_body ? srv_.limits.error_body(status, message) : message;
  queue(
      fmt::format("HTTP/1.1 {} {}\r\nServer: ascent\r\nContent-Type: application/json\r\nContent-Length: "
                  "{}\r\nConnection: close\r\n\r\n{}",
                  status, status_reason(status), body.size(), body));
  exchange_over_ = true;
  in_exchange_ = true;  // after_response closes it once the answer is written
  if (!writing_ && out_.empty()) after_response();
}

void Session::dispatch() {
  auto msg = parser_->release();
  parser_.reset();
  HttpRequest req;
  req.method = std::string(msg.method_string());
  req.target = std::string(msg.target());
  req.path = req.target.substr(0, req.target.find('?'));
  for (const auto& f : msg) req.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
  req.body = std::move(msg.body());
  req.peer = peer_;
  keep_alive_ = msg.keep_alive();
  http10_ = msg.version() < 11;
  timed_out_ = false;
  in_exchange_ = true;
  exchange_over_ = false;
  srv_.busy.fetch_add(1);
  current_ = std::make_shared<ExchangeImpl>(shared_from_this());
  std::shared_ptr<Exchange> ex = current_;
  if (!reading_ && buf_.size() < kMaxPipelined) read_some();  // notices a client that leaves
  try {
    srv_.handler(req, ex);
  } catch (const std::exception& e) {
    ex->send(500, "application/json",
             srv_.limits.error_body ? srv_.limits.error_body(500, e.what()) : std::string(e.what()));
  }
}

void Session::queue(std::string s) {
  if (closed_) return;
  out_.push_back(std::move(s));
  if (!writing_) do_write();
}

void Session::do_write() {
  writing_ = true;
  const uint64_t gen = ++write_gen_;
  write_timer_.expires_after(seconds(srv_.limits.write_timeout_s));
  write_timer_.async_wait([self = shared_from_this(), gen](beast::error_code ec) {
    if (ec || gen != self->write_gen_ || self->closed_) return;
    self->client_gone();
  });
  net::async_write(sock_, net::buffer(out_.front()),
                   [self = shared_from_this()](beast::error_code ec, size_t) { self->on_write(ec); });
}

void Session::on_write(beast::error_code ec) {
  writing_ = false;
  ++write_gen_;
  write_timer_.cancel();
  // Closed while this write was in flight (the client left, a timeout): its buffer was kept until now.
  if (closed_) {
    out_.clear();
    return;
  }
  if (ec) return client_gone();
  out_.pop_front();
  if (!out_.empty()) return do_write();
  if (exchange_over_) after_response();
}

void Session::end_exchange() {
  // Until its last bytes are written the connection still counts for a shutdown waiting on busy().
  if ((writing_ || !out_.empty()) && !closed_ && !flush_counted_) {
    flush_counted_ = true;
    srv_.unflushed.fetch_add(1);
  }
  srv_.busy.fetch_sub(1);
  current_.reset();
  exchange_over_ = true;
  if (!writing_ && out_.empty()) after_response();
}

void Session::flushed() {
  if (!flush_counted_) return;
  flush_counted_ = false;
  srv_.unflushed.fetch_sub(1);
}

void Session::after_response() {
  flushed();
  exchange_over_ = false;
  in_exchange_ = false;
  if (closed_) return;
  if (!keep_alive_ || !srv_.accepting || peer_eof_) return linger_close();
  if (buf_.size() > 0) {
    // A pipelined request is already here: read it, once the watching read (if any) stands down.
    if (reading_) {
      resume_pipelined_ = true;
      beast::error_code ignored;
      sock_.cancel(ignored);
    } else {
      read_request();
    }
    return;
  }
  arm_read_timer(srv_.limits.idle_timeout_s);
  if (!reading_) read_some();
}

void Session::client_gone() {
  if (gone_) return;
  gone_ = true;
  if (current_) current_->mark_gone();
  close();
}

void Session::linger_close() {
  if (closed_ || lingering_) return;
  lingering_ = true;
  beast::error_code ignored;
  sock_.shutdown(tcp::socket::shutdown_send, ignored);
  arm_read_timer(kLingerSeconds);
  buf_.consume(buf_.size());
  if (!reading_) read_some();
}

void Session::close() {
  flushed();
  if (closed_) return;
  closed_ = true;
  beast::error_code ignored;
  sock_.shutdown(tcp::socket::shutdown_both, ignored);
  sock_.close(ignored);
  ++read_gen_;
  ++write_gen_;
  read_timer_.cancel();
  write_timer_.cancel();
  // A write in flight still reads its buffer (out_.front()) until its handler runs, which clears the queue then.
  if (!writing_) out_.clear();
}

void HttpServer::Impl::accept() {
  acceptor.async_accept(ioc, [this](beast::error_code ec, tcp::socket sock) {
    if (!accepting) return;
    if (ec) {
      // Out of descriptors or another passing failure: try again shortly rather than spin.
      accept_retry.expires_after(std::chrono::milliseconds(50));
      accept_retry.async_wait([this](beast::error_code e) {
        if (!e && accepting) accept();
      });
      return;
    }
    auto s = std::make_shared<Session>(*this, std::move(sock));
    sessions.remove_if([](const std::weak_ptr<Session>& w) { return w.expired(); });
    sessions.push_back(s);
    s->start();
    accept();
  });
}

void HttpServer::Impl::wait_signal() {
  signals.async_wait([this](beast::error_code ec, int sig) {
    if (ec) return;
    if (on_signal) on_signal(sig);
    wait_signal();
  });
}

void HttpServer::Impl::close_idle_sessions() {
  for (auto& w : sessions) {
    if (auto s = w.lock()) s->drain();
  }
}

HttpServer::HttpServer(const std::string& host, uint16_t port, HttpLimits limits, HttpHandler handler)
    : impl_(std::make_unique<Impl>()) {
  impl_->limits = std::move(limits);
  impl_->handler = std::move(handler);
  beast::error_code ec;
  const auto addr = net::ip::make_address(host, ec);
  ASCENT_CHECK(!ec, "--host {}: not an IP address ({})", host, ec.message());
  const tcp::endpoint ep(addr, port);
  auto& a = impl_->acceptor;
  a.open(ep.protocol(), ec);
  ASCENT_CHECK(!ec, "--host {}: {}", host, ec.message());
  a.set_option(net::socket_base::reuse_address(true), ec);
  a.bind(ep, ec);
  ASCENT_CHECK(!ec, "cannot listen on {}:{}: {}", host, port, ec.message());
  a.listen(net::socket_base::max_listen_connections, ec);
  ASCENT_CHECK(!ec, "cannot listen on {}:{}: {}", host, port, ec.message());
}

HttpServer::~HttpServer() {
  stop();
}

uint16_t HttpServer::port() const {
  return impl_->acceptor.local_endpoint().port();
}

void HttpServer::start(std::function<void(int)> on_signal) {
  impl_->on_signal = std::move(on_signal);
  impl_->signals.add(SIGINT);
  impl_->signals.add(SIGTERM);
  impl_->wait_signal();
  impl_->work.emplace(impl_->ioc.get_executor());
  impl_->accept();
  impl_->thread = std::thread([this] { impl_->ioc.run(); });
}

void HttpServer::stop_accepting() {
  net::post(impl_->ioc, [this] {
    if (!impl_->accepting) return;
    impl_->accepting = false;
    beast::error_code ignored;
    impl_->acceptor.close(ignored);
    impl_->accept_retry.cancel();
    impl_->close_idle_sessions();
  });
}

int64_t HttpServer::busy() const {
  return impl_->busy.load() + impl_->unflushed.load();
}

void HttpServer::post(std::function<void()> fn) {
  net::post(impl_->ioc, std::move(fn));
}

void HttpServer::stop() {
  if (!impl_ || !impl_->thread.joinable()) return;
  net::post(impl_->ioc, [this] {
    impl_->accepting = false;
    beast::error_code ignored;
    impl_->acceptor.close(ignored);
    impl_->signals.cancel(ignored);
    impl_->accept_retry.cancel();
    for (auto& w : impl_->sessions) {
      if (auto s = w.lock()) s->drain();
    }
  });
  impl_->work.reset();
  impl_->ioc.stop();
  impl_->thread.join();
}

}  // namespace ascent::serve

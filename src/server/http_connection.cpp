#include "server/http_connection.h"

#include <sys/socket.h>

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/status.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdint>

#include <fmt/format.h>

#include "server/api_error.h"

namespace tide::server {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;

namespace {

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

std::string error_body(int status, const std::string& message) {
  return dump_json(error_json(ApiError(status, message)));
}

}  // namespace

std::string HttpRequest::header(std::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (iequals(key, name)) return value;
  }
  return {};
}

std::string reason_phrase(int status) {
  const std::string_view reason = http::obsolete_reason(static_cast<http::status>(status));
  return reason.empty() || reason == "<unknown-status>" ? std::string("Unknown") : std::string(reason);
}

std::string format_head(int status, const HttpReply& reply, std::optional<size_t> content_length, bool chunked,
                        bool keep_alive) {
  std::string head = fmt::format("HTTP/1.1 {} {}\r\nServer: tide\r\n", status, reason_phrase(status));
  if (!reply.content_type.empty()) head += fmt::format("Content-Type: {}\r\n", reply.content_type);
  for (const auto& [name, value] : reply.headers) head += fmt::format("{}: {}\r\n", name, value);
  if (content_length) head += fmt::format("Content-Length: {}\r\n", *content_length);
  if (chunked) head += "Transfer-Encoding: chunked\r\n";
  head += keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  return head;
}

void apply_limits(http::request_parser<http::string_body>& parser, const ConnectionLimits& limits) {
  parser.header_limit(static_cast<uint32_t>(std::min<size_t>(limits.max_header_bytes, UINT32_MAX)));
  parser.body_limit(limits.max_body_bytes);
}

HttpRequest to_http_request(http::request<http::string_body>&& message, std::string remote) {
  HttpRequest request;
  request.method = std::string(message.method_string());
  request.target = std::string(message.target());
  request.path = request.target.substr(0, request.target.find('?'));
  for (const auto& field : message) request.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
  request.body = std::move(message.body());
  request.remote = std::move(remote);
  return request;
}

Connection::Connection(net::ip::tcp::socket socket, ConnectionHost& host, const ConnectionLimits& limits)
    : stream_(std::move(socket)), host_(host), limits_(limits) {
  beast::error_code ec;
  const auto endpoint = stream_.socket().remote_endpoint(ec);
  remote_ = ec ? std::string("-") : fmt::format("{}:{}", endpoint.address().to_string(), endpoint.port());
}

Connection::~Connection() {
  if (source_) source_->cancel();
  host_.on_closed(this);
}

void Connection::start() {
  net::post(stream_.get_executor(), [self = shared_from_this()] { self->wait_for_request(); });
}

void Connection::shutdown() {
  net::post(stream_.get_executor(), [self = shared_from_this()] {
    self->shutting_down_ = true;
    self->keep_alive_ = false;
    if (!self->busy_) self->do_close();
  });
}

void Connection::cancel_reply() {
  net::post(stream_.get_executor(), [self = shared_from_this()] {
    if (self->source_) self->source_->cancel();
  });
}

void Connection::close() {
  net::post(stream_.get_executor(), [self = shared_from_this()] { self->do_close(); });
}

void Connection::do_close() {
  const std::shared_ptr<Connection> keep = std::move(self_);  // released when this returns
  if (closed_) return;
  closed_ = true;
  if (source_) source_->cancel();
  source_.reset();  // a generation's samples stop counting as pending now
  beast::error_code ec;
  stream_.socket().shutdown(net::ip::tcp::socket::shutdown_both, ec);
  stream_.socket().close(ec);
}

// Between requests: the next request's first byte must come within the idle time (the first request's header
// deadline counts from the accept). Pipelined bytes already buffered go straight to the parser.
void Connection::wait_for_request() {
  if (closed_ || shutting_down_) {
    do_close();
    return;
  }
  busy_ = false;
  parser_.emplace();
  apply_limits(*parser_, limits_);
  if (first_ || buffer_.size() > 0) {
    read_header();
    return;
  }
  stream_.expires_after(limits_.idle);
  stream_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](beast::error_code ec, size_t n) {
    if (ec || self->closed_) {
      self->do_close();  // idle timeout, or the client closed a kept-alive connection
      return;
    }
    self->buffer_.commit(n);
    self->read_header();
  });
}

void Connection::read_header() {
  stream_.expires_after(limits_.header);
  first_ = false;
  http::async_read_header(stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
    self->on_header(ec);
  });
}

void Connection::on_header(beast::error_code ec) {
  if (closed_) return;
  busy_ = true;
  if (ec == http::error::end_of_stream || ec == net::error::eof) {
    do_close();  // closed before a request began
    return;
  }
  if ((ec == beast::error::timeout || ec == http::error::partial_message) && !parser_->got_some()) {
    do_close();  // a connection that never sent a byte (a port probe) leaves no log line
    return;
  }
  if (ec == beast::error::timeout || ec == http::error::partial_message) {
    host_.on_exchange(remote_, "", "", 408, ec == beast::error::timeout ? "header not complete in time" : "closed mid-header");
    do_close();
    return;
  }
  const auto& head = parser_->get();
  method_ = std::string(head.method_string());
  target_ = std::string(head.target());
  if (ec == http::error::header_limit) {
    refuse(431, fmt::format("the request header is larger than {} bytes", limits_.max_header_bytes));
    return;
  }
  if (ec == http::error::body_limit) {
    refuse(413, fmt::format("the request body is larger than {} bytes", limits_.max_body_bytes));
    return;
  }
  if (ec == http::error::multiple_content_length) {
    refuse(400, "the request has Content-Length headers that differ");
    return;
  }
  if (ec) {
    refuse(400, "malformed HTTP request: " + ec.message());
    return;
  }
  http10_ = head.version() < 11;
  if (parser_->is_done()) {
    dispatch();
    return;
  }
  // A client that asks before sending its body (curl does above 1 KiB) is told to go on.
  if (iequals(std::string(head[http::field::expect]), "100-continue") && !http10_) {
    send("HTTP/1.1 100 Continue\r\n\r\n");
  }
  read_body();
}

void Connection::read_body() {
  stream_.expires_after(limits_.body);
  http::async_read(stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
    self->on_body(ec);
  });
}

void Connection::on_body(beast::error_code ec) {
  if (closed_) return;
  if (ec == http::error::body_limit) {
    refuse(413, fmt::format("the request body is larger than {} bytes", limits_.max_body_bytes));
    return;
  }
  if (ec == beast::error::timeout || ec == http::error::partial_message || ec == net::error::eof) {
    host_.on_exchange(remote_, method_, target_, 408,
                      ec == beast::error::timeout ? "body not complete in time" : "closed mid-body");
    do_close();
    return;
  }
  if (ec) {
    refuse(400, "malformed HTTP request body: " + ec.message());
    return;
  }
  dispatch();
}

void Connection::dispatch() {
  stream_.expires_never();
  auto message = parser_->release();
  parser_.reset();
  keep_alive_ = keep_alive_ && message.keep_alive() && !shutting_down_;
  HttpRequest request = to_http_request(std::move(message), remote_);
  const uint64_t exchange = ++exchange_;
  source_done_ = false;
  reply_complete_ = false;
  streaming_ = false;
  watch_client(exchange);
  host_.handle(std::move(request), [self = shared_from_this(), exchange](HttpReply reply) {
    net::post(self->stream_.get_executor(), [self, exchange, reply = std::move(reply)]() mutable {
      if (exchange != self->exchange_ || self->closed_) {
        if (reply.source) reply.source->cancel();
        return;
      }
      self->on_reply(std::move(reply));
    });
  });
}

// A client that closes its connection while its request is answered: the socket turns readable with nothing to
// read. Bytes of a next (pipelined) request also make it readable; they wait in the socket, and the watch ends.
void Connection::watch_client(uint64_t exchange) {
  if (buffer_.size() > 0) return;
  stream_.socket().async_wait(net::ip::tcp::socket::wait_read, [self = shared_from_this(), exchange](beast::error_code ec) {
    if (ec || self->closed_ || exchange != self->exchange_ || self->reply_complete_) return;
    char byte = 0;
    const ssize_t n = ::recv(self->stream_.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      self->watch_client(exchange);  // a readiness report with nothing to read (edge-triggered polling): watch on
      return;
    }
    if (n <= 0) {
      self->host_.on_exchange(self->remote_, self->method_, self->target_, 499, "client closed the connection");
      self->keep_alive_ = false;
      self->do_close();
    }
  });
}

void Connection::on_reply(HttpReply reply) {
  status_ = reply.status;
  if (reply.close) keep_alive_ = false;
  if (!reply.source) {
    send(format_head(reply.status, reply, reply.body.size(), false, keep_alive_) + reply.body);
    reply_complete_ = true;
    if (!writing_) finish_exchange();
    return;
  }
  source_ = std::move(reply.source);
  // While the source works, no I/O may be pending on the connection (the watch ends when a pipelined request
  // arrives): it keeps itself alive until the exchange ends or it closes.
  self_ = shared_from_this();
  streaming_ = !reply.deferred;
  if (streaming_) {
    // HTTP/1.0 has no chunked coding: the body ends with the connection.
    chunked_ = !http10_;
    if (!chunked_) keep_alive_ = false;
    send(format_head(reply.status, reply, std::nullopt, chunked_, keep_alive_));
  }
  std::weak_ptr<Connection> weak = weak_from_this();
  const uint64_t exchange = exchange_;
  source_->start([weak, exchange] {
    if (const auto self = weak.lock()) {
      net::post(self->stream_.get_executor(), [self, exchange] {
        if (exchange == self->exchange_) self->pump();
      });
    }
  });
}

// Takes what the source has ready and writes it; one write at a time (on_written pumps again).
void Connection::pump() {
  if (closed_ || !source_ || source_done_ || writing_) return;
  ReplyPoll poll = source_->poll();
  source_done_ = poll.done;
  if (streaming_) {
    std::string bytes;
    if (!poll.bytes.empty()) {
      bytes = chunked_ ? fmt::format("{:x}\r\n", poll.bytes.size()) + poll.bytes + "\r\n" : std::move(poll.bytes);
    }
    if (poll.done && chunked_) bytes += "0\r\n\r\n";
    if (poll.done) reply_complete_ = true;
    if (!bytes.empty()) send(std::move(bytes));
  } else if (poll.done) {
    HttpReply whole;
    if (poll.reply) {
      whole = std::move(*poll.reply);
    } else {
      whole.status = 500;
      whole.body = error_body(500, "the reply was lost");
    }
    status_ = whole.status;
    send(format_head(whole.status, whole, whole.body.size(), false, keep_alive_) + whole.body);
    reply_complete_ = true;
  }
  if (reply_complete_ && !writing_) finish_exchange();
}

void Connection::send(std::string bytes) {
  out_ += bytes;
  if (!writing_) flush();
}

void Connection::flush() {
  if (closed_ || out_.empty()) return;
  writing_ = true;
  inflight_.swap(out_);
  out_.clear();
  stream_.expires_after(limits_.write);
  net::async_write(stream_, net::buffer(inflight_), [self = shared_from_this()](beast::error_code ec, size_t) {
    self->on_written(ec);
  });
}

void Connection::on_written(beast::error_code ec) {
  writing_ = false;
  inflight_.clear();
  if (closed_) return;
  if (ec) {
    host_.on_exchange(remote_, method_, target_, status_, "write failed: " + ec.message());
    do_close();
    return;
  }
  if (!out_.empty()) {
    flush();
    return;
  }
  if (reply_complete_) {
    finish_exchange();
    return;
  }
  if (source_) pump();
}

void Connection::finish_exchange() {
  if (!reply_complete_ || writing_ || closed_) return;
  const std::shared_ptr<Connection> keep = std::move(self_);  // released when this returns
  host_.on_exchange(remote_, method_, target_, status_, "");
  source_.reset();
  reply_complete_ = false;
  ++exchange_;  // late notifications and watches of this exchange are ignored
  if (!keep_alive_) {
    if (linger_) {
      linger_close();
    } else {
      do_close();
    }
    return;
  }
  wait_for_request();
}

// After refusing a request whose body may still be arriving: closing at once would answer the client's next bytes
// with a reset, which can destroy the refusal before the client reads it. So the sending side closes first and
// what still arrives is read and dropped, for a while and up to a bound (a body somewhat over the limit is
// drained whole, also from a slow client), before the socket closes.
void Connection::linger_close() {
  beast::error_code ec;
  stream_.socket().shutdown(net::ip::tcp::socket::shutdown_send, ec);
  if (ec) {
    do_close();
    return;
  }
  discard_.resize(64u << 10);
  stream_.expires_after(std::chrono::seconds(10));
  discard_input(0);
}

void Connection::discard_input(size_t discarded) {
  stream_.async_read_some(net::buffer(discard_), [self = shared_from_this(), discarded](beast::error_code ec, size_t n) {
    constexpr size_t kMaxDiscarded = 64u << 20;
    if (ec || self->closed_ || discarded + n > kMaxDiscarded) {
      self->do_close();
      return;
    }
    self->discard_input(discarded + n);
  });
}

void Connection::refuse(int status, const std::string& message) {
  keep_alive_ = false;
  linger_ = true;
  status_ = status;
  HttpReply reply;
  reply.status = status;
  reply.body = error_body(status, message);
  send(format_head(status, reply, reply.body.size(), false, /*keep_alive=*/false) + reply.body);
  reply_complete_ = true;
  if (!writing_) finish_exchange();
}

}  // namespace tide::server

// One HTTP/1.x connection on Boost.Asio, read with Beast's parser: requests in order (keep-alive and pipelining),
// each phase under its own deadline (a first byte within the idle time, the whole header, the whole body, each
// write), body limits that hold for chunked bodies too, Expect: 100-continue, and replies written as they are
// ready: whole, chunked as their source produces them (server-sent events), or deferred until a generation ends.
// While a request is being answered the socket is watched for the client going away, which cancels the reply.
// No thread is held by a waiting or slow client.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/http_types.h"

namespace tide::server {

class Connection;

// What a connection needs from the server.
class ConnectionHost {
 public:
  virtual ~ConnectionHost() = default;
  // Answers `request` (on a worker thread); calls `reply` exactly once, from any thread.
  virtual void handle(HttpRequest request, std::function<void(HttpReply)> reply) = 0;
  // One exchange ended: `method` and `target` empty when the request line was never read.
  virtual void on_exchange(const std::string& remote, const std::string& method, const std::string& target,
                           int status, const std::string& note) = 0;
  // The connection is being destroyed.
  virtual void on_closed(const Connection* connection) = 0;
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(boost::asio::ip::tcp::socket socket, ConnectionHost& host, const ConnectionLimits& limits);
  ~Connection();

  void start();
  // Thread-safe, asynchronous: no further requests are read; an idle connection closes now, a busy one after
  // its reply.
  void shutdown();
  // Thread-safe, asynchronous: the reply being produced is cancelled (it still ends properly).
  void cancel_reply();
  // Thread-safe, asynchronous: the socket is closed.
  void close();
  // A request is being answered (read, handled or written).
  bool busy() const { return busy_.load(); }

 private:
  void wait_for_request();
  void read_header();
  void on_header(boost::beast::error_code ec);
  void read_body();
  void on_body(boost::beast::error_code ec);
  void dispatch();
  void watch_client(uint64_t exchange);
  void on_reply(HttpReply reply);
  void pump();
  void send(std::string bytes);
  void flush();
  void on_written(boost::beast::error_code ec);
  void finish_exchange();
  // Refuses the request being read with `status` (an error body) and closes after it.
  void refuse(int status, const std::string& message);
  void do_close();
  void linger_close();
  void discard_input(size_t discarded);

  boost::beast::tcp_stream stream_;
  ConnectionHost& host_;
  const ConnectionLimits limits_;
  std::string remote_;
  boost::beast::flat_buffer buffer_;
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;

  // The exchange in progress (state touched only on the connection's strand).
  uint64_t exchange_ = 0;  // counts exchanges, so late callbacks of an earlier one are ignored
  bool first_ = true;
  bool keep_alive_ = true;
  bool http10_ = false;
  bool shutting_down_ = false;
  bool closed_ = false;
  bool linger_ = false;      // close after a refusal: drop what still arrives for a moment first
  std::vector<char> discard_;
  std::string method_, target_;
  int status_ = 0;
  std::shared_ptr<ReplySource> source_;
  std::shared_ptr<Connection> self_;  // set while source_ produces the reply
  bool streaming_ = false;  // the body comes in chunks from source_
  bool chunked_ = false;    // chunked transfer coding (HTTP/1.1)
  bool source_done_ = false;
  bool reply_complete_ = false;
  std::string out_, inflight_;
  bool writing_ = false;
  std::atomic<bool> busy_{false};
};

// The connection's parser limits (header and body sizes; the body limit holds for chunked bodies too).
void apply_limits(boost::beast::http::request_parser<boost::beast::http::string_body>& parser,
                  const ConnectionLimits& limits);
// A parsed request as the handlers see it.
HttpRequest to_http_request(boost::beast::http::request<boost::beast::http::string_body>&& message, std::string remote);
// The status line's reason phrase ("Not Found").
std::string reason_phrase(int status);
// A reply's head: status line, Content-Type, the extra headers, Content-Length (or chunked) and Connection.
std::string format_head(int status, const HttpReply& reply, std::optional<size_t> content_length, bool chunked,
                        bool keep_alive);

}  // namespace tide::server

// The HTTP layer's view of one exchange, with no sockets: HttpRequest (a parsed request), HttpReply (the answer:
// a whole body, a head with a body that follows in pieces, or a whole answer that is ready later) and
// ReplySource (what produces the later parts, e.g. a generation). Connections (http_connection.h) move the bytes;
// handlers (http_routes.h) make replies.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tide::server {

// What a connection allows a client.
struct ConnectionLimits {
  std::chrono::milliseconds idle{5000};     // keep-alive: the next request's first byte
  std::chrono::milliseconds header{10000};  // from a request's first byte (or the accept) to its header's end
  std::chrono::milliseconds body{60000};    // the whole body, after the header
  std::chrono::milliseconds write{60000};   // each write of a reply (a client that stops reading is dropped)
  size_t max_header_bytes = 64u << 10;
  size_t max_body_bytes = 32u << 20;
};

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // as sent: path and query
  std::string path;    // target without the query
  std::vector<std::pair<std::string, std::string>> headers;  // in arrival order, names as sent
  std::string body;
  std::string remote;  // "address:port" of the client

  // The first header of that name (ASCII case-insensitive), or empty.
  std::string header(std::string_view name) const;
};

struct HttpReply;

// What a ReplySource has ready: body bytes (a streamed reply), or the whole reply (a deferred one); `done` once
// nothing more will come.
struct ReplyPoll {
  std::string bytes;
  std::shared_ptr<HttpReply> reply;
  bool done = false;
};

// Produces a reply's later parts. start() gives it a function to call, from any thread and possibly at once,
// whenever poll() may have something new; poll() never blocks; cancel() (the client went away, the server stops)
// asks it to finish soon: it still ends with done.
class ReplySource {
 public:
  virtual ~ReplySource() = default;
  virtual void start(std::function<void()> notify) = 0;
  virtual ReplyPoll poll() = 0;
  virtual void cancel() = 0;
};

struct HttpReply {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;  // beyond Content-Type, -Length and Connection
  std::string body;
  // Set: the body (streamed: status and headers above are sent at once, the body in chunks as poll() gives it)
  // or the whole reply (deferred: poll() gives it when ready) comes from `source`.
  std::shared_ptr<ReplySource> source;
  bool deferred = false;
  bool close = false;  // close the connection after this reply
};

}  // namespace tide::server

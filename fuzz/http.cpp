// Fuzzes the HTTP layer's request side without sockets: bytes as a client sends them on one connection go through
// the parser with the connection's limits (server/http_connection.h), arriving in pieces whose size the first
// byte picks; every request that parses is converted as a connection does and answered by the routes before a
// model is loaded (authentication, unknown paths and methods, readiness, /metrics). Pipelined requests follow
// each other until the parser refuses the input. Properties: a parsed request's path is a prefix of its target,
// every reply has a valid status whose head formats, and an error reply's body is OpenAI's error object.
#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>

#include <algorithm>
#include <optional>

#include <nlohmann/json.hpp>

#include "fuzz/fuzz_util.h"
#include "server/http_connection.h"
#include "server/http_routes.h"

namespace {

namespace http = boost::beast::http;
using namespace tide::server;

struct Fixture {
  ServerOptions options;
  MetricsRegistry metrics;
  std::optional<ApiRoutes> routes;
  Fixture() {
    options.api_key = "fuzz-key";
    options.limits.max_header_bytes = 4096;
    options.limits.max_body_bytes = 1 << 16;
    routes.emplace(options, metrics);
  }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

void answer(http::request<http::string_body>&& message) {
  HttpRequest request = to_http_request(std::move(message), "127.0.0.1:1");
  FUZZ_CHECK(request.target.compare(0, request.path.size(), request.path) == 0);
  const HttpReply reply = fixture().routes->handle(request);
  FUZZ_CHECK(reply.status >= 200 && reply.status <= 599);
  FUZZ_CHECK(!reply.source);  // no model: nothing is generated
  const std::string head = format_head(reply.status, reply, reply.body.size(), false, true);
  FUZZ_CHECK(head.find("\r\n\r\n") == head.size() - 4);
  if (reply.status >= 400) {
    const nlohmann::json body = nlohmann::json::parse(reply.body);
    FUZZ_CHECK(body.at("error").at("message").is_string());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t piece = 1 + data[0] % 97;  // bytes arriving at a time
  const std::string_view input = tide::fuzz::as_text(data + 1, size - 1);
  size_t begin = 0;  // first byte the parser has not consumed
  size_t end = 0;    // bytes arrived so far
  for (int requests = 0; requests < 64; ++requests) {
    http::request_parser<http::string_body> parser;
    apply_limits(parser, fixture().options.limits);
    parser.eager(true);
    while (!parser.is_done()) {
      boost::beast::error_code ec;
      size_t used = 0;
      if (begin < end) used = parser.put(boost::asio::buffer(input.data() + begin, end - begin), ec);
      begin += used;
      if (ec && ec != http::error::need_more) return 0;  // refused: the connection answers 400 / 413 / 431
      if (parser.is_done()) break;
      if (used == 0 || ec == http::error::need_more) {
        if (end == input.size()) {
          if (parser.got_some()) parser.put_eof(ec);  // the client closed mid-request
          return 0;
        }
        end = std::min(input.size(), end + piece);
      }
    }
    answer(parser.release());
  }
  return 0;
}

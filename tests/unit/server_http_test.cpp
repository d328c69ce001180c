// The HTTP layer's pieces without sockets: reply heads, the API key comparison, and the routes' answers before a
// model is loaded (auth, unknown paths and methods, readiness, metrics protection).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/http_connection.h"
#include "server/http_routes.h"

namespace tide::server {
namespace {

HttpRequest request(std::string method, std::string path, std::string authorization = {}) {
  HttpRequest r;
  r.method = std::move(method);
  r.target = path + "?x=1";
  r.path = std::move(path);
  if (!authorization.empty()) r.headers.emplace_back("authorization", std::move(authorization));
  return r;
}

nlohmann::json error_of(const HttpReply& reply) { return nlohmann::json::parse(reply.body).at("error"); }

TEST(ServerHttp, ReplyHeads) {
  HttpReply reply;
  reply.headers.emplace_back("Retry-After", "1");
  EXPECT_EQ(format_head(429, reply, 12, false, true),
            "HTTP/1.1 429 Too Many Requests\r\nServer: tide\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
            "Content-Length: 12\r\nConnection: keep-alive\r\n\r\n");
  reply.headers.clear();
  reply.content_type = "text/event-stream";
  EXPECT_EQ(format_head(200, reply, std::nullopt, true, false),
            "HTTP/1.1 200 OK\r\nServer: tide\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
            "Connection: close\r\n\r\n");
  EXPECT_EQ(reason_phrase(431), "Request Header Fields Too Large");
  EXPECT_EQ(reason_phrase(799), "Unknown");
}

TEST(ServerHttp, HeaderLookupIgnoresCase) {
  HttpRequest r;
  r.headers = {{"Content-Type", "a"}, {"X-Y", "b"}, {"content-type", "c"}};
  EXPECT_EQ(r.header("content-TYPE"), "a");
  EXPECT_EQ(r.header("x-y"), "b");
  EXPECT_EQ(r.header("missing"), "");
}

TEST(ServerHttp, ConstantTimeEqual) {
  EXPECT_TRUE(constant_time_equal("Bearer k", "Bearer k"));
  EXPECT_FALSE(constant_time_equal("Bearer ", "Bearer k"));
  EXPECT_FALSE(constant_time_equal("Bearer kk", "Bearer k"));
  EXPECT_FALSE(constant_time_equal("Bearer j", "Bearer k"));
  EXPECT_FALSE(constant_time_equal("", "Bearer k"));
  EXPECT_TRUE(constant_time_equal("", ""));
  // A given string that is the expected one plus NUL bytes differs in length.
  EXPECT_FALSE(constant_time_equal(std::string("Bearer k\0", 9), "Bearer k"));
}

TEST(ServerHttp, RoutesBeforeTheModelIsLoaded) {
  ServerOptions options;
  options.api_key = "k";
  MetricsRegistry metrics;
  ApiRoutes routes(options, metrics);
  // /health needs no key and says the model is loading.
  EXPECT_EQ(routes.handle(request("GET", "/health")).status, 503);
  // Every other route needs the key, checked before readiness.
  for (const auto& [method, path] : std::vector<std::pair<std::string, std::string>>{
           {"GET", "/version"}, {"GET", "/v1/models"}, {"POST", "/v1/completions"}, {"POST", "/tokenize"}}) {
    const HttpReply denied = routes.handle(request(method, path, "Bearer wrong"));
    EXPECT_EQ(denied.status, 401) << path;
    EXPECT_EQ(error_of(denied).at("type"), "authentication_error");
  }
  EXPECT_EQ(routes.handle(request("GET", "/version", "Bearer k")).status, 200);
  const HttpReply loading = routes.handle(request("POST", "/v1/completions", "Bearer k"));
  EXPECT_EQ(loading.status, 503);
  EXPECT_EQ(error_of(loading).at("type"), "service_unavailable");
  // /metrics is open unless asked otherwise.
  EXPECT_EQ(routes.handle(request("GET", "/metrics")).status, 200);
  const HttpReply unknown = routes.handle(request("GET", "/v2/nothing", "Bearer k"));
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(error_of(unknown).at("message"), "Not Found: GET /v2/nothing");
  const HttpReply method = routes.handle(request("DELETE", "/tokenize", "Bearer k"));
  EXPECT_EQ(method.status, 405);
  ASSERT_EQ(method.headers.size(), 1u);
  EXPECT_EQ(method.headers[0], (std::pair<std::string, std::string>{"Allow", "POST"}));
}

TEST(ServerHttp, ProtectedMetrics) {
  ServerOptions options;
  options.api_key = "k";
  options.metrics_need_api_key = true;
  MetricsRegistry metrics;
  ApiRoutes routes(options, metrics);
  EXPECT_EQ(routes.handle(request("GET", "/metrics")).status, 401);
  EXPECT_EQ(routes.handle(request("GET", "/metrics", "Bearer k")).status, 200);
}

}  // namespace
}  // namespace tide::server

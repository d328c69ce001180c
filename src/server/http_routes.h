// ApiRoutes: tide's endpoints as functions from an HttpRequest to an HttpReply, with no sockets: /health,
// /version, /metrics, /v1/models, /v1/completions, /v1/chat/completions, /tokenize, /detokenize. Checks the API key
// (constant time) on every route but /health (and /metrics unless asked), answers 503 until the model is loaded
// and once the server stops, 429 (with Retry-After) when the samples waiting would pass the limit, and turns every
// refusal into OpenAI's error body. A generation's reply comes later from its GenerationRun: streamed as
// server-sent events, or whole when it ends.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/api_error.h"
#include "server/http_server.h"
#include "server/http_types.h"
#include "server/metrics.h"
#include "server/openai_service.h"

namespace tide::server {

class ApiRoutes {
 public:
  ApiRoutes(const ServerOptions& options, MetricsRegistry& metrics);

  // The loaded model: the model endpoints answer from here on. Call once, before any handle() may see it.
  void set_ready(Engine& engine, OpenAiService& service);
  // The server stops: /health and new generations answer 503.
  void set_stopping() { stopping_ = true; }
  bool ready() const { return ready_.load(); }
  // Samples of started generations that have not finished.
  int64_t pending_samples() const { return pending_samples_->load(); }

  // Never throws: errors become error replies.
  HttpReply handle(const HttpRequest& request);

 private:
  HttpReply route(const HttpRequest& request);
  HttpReply generation(const HttpRequest& request, ApiShape shape);
  bool authorized(const HttpRequest& request) const;

  const ServerOptions& options_;
  MetricsRegistry& metrics_;
  Engine* engine_ = nullptr;
  OpenAiService* service_ = nullptr;
  std::atomic<bool> ready_{false};
  std::atomic<bool> stopping_{false};
  std::shared_ptr<std::atomic<int64_t>> pending_samples_ = std::make_shared<std::atomic<int64_t>>(0);
};

HttpReply json_reply(int status, const nlohmann::json& body);
HttpReply error_reply(const ApiError& error);
// Equal strings, in a time that depends on `expected`'s length only (not on where `given` differs).
bool constant_time_equal(std::string_view given, std::string_view expected);

}  // namespace tide::server

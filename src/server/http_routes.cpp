#include "server/http_routes.h"

#include <new>
#include <utility>

#include <fmt/format.h>

#include "core/error.h"
#include "server/cohere_protocol.h"
#include "server/openai_protocol.h"

#ifndef TIDE_VERSION
#define TIDE_VERSION "unknown"
#endif

namespace tide::server {

using nlohmann::json;

namespace {

// A started generation as a reply source: its server-sent events as they arrive, or its whole response at the
// end. Counts its samples as pending until it is gone.
class GenerationSource final : public ReplySource {
 public:
  GenerationSource(std::unique_ptr<GenerationRun> run, std::shared_ptr<std::atomic<int64_t>> pending, int64_t samples)
      : run_(std::move(run)), pending_(std::move(pending)), samples_(samples) {}
  ~GenerationSource() override { pending_->fetch_sub(samples_); }

  void start(std::function<void()> notify) override { run_->set_notify(std::move(notify)); }

  ReplyPoll poll() override {
    ReplyPoll poll;
    if (run_->job().stream) {
      poll.bytes = run_->take_events(poll.done);
      return poll;
    }
    if (!run_->advance()) return poll;
    poll.done = true;
    const std::optional<std::string> error = run_->error();
    poll.reply = std::make_shared<HttpReply>(
        error ? error_reply(ApiError(500, "generation failed: " + *error, "", "internal_error"))
              : json_reply(200, run_->response()));
    return poll;
  }

  void cancel() override { run_->cancel(); }

 private:
  std::unique_ptr<GenerationRun> run_;
  std::shared_ptr<std::atomic<int64_t>> pending_;
  int64_t samples_;
};

}  // namespace

HttpReply json_reply(int status, const json& body) {
  HttpReply reply;
  reply.status = status;
  reply.body = dump_json(body);
  return reply;
}

HttpReply error_reply(const ApiError& error) {
  HttpReply reply = json_reply(error.status(), error_json(error));
  if (error.status() == 429 || error.status() == 503) reply.headers.emplace_back("Retry-After", "1");
  return reply;
}

bool constant_time_equal(std::string_view given, std::string_view expected) {
  unsigned diff = given.size() == expected.size() ? 0u : 1u;
  for (size_t i = 0; i < expected.size(); ++i) {
    const unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff |= g ^ static_cast<unsigned char>(expected[i]);
  }
  return diff == 0;
}

ApiRoutes::ApiRoutes(const ServerOptions& options, MetricsRegistry& metrics) : options_(options), metrics_(metrics) {}

void ApiRoutes::set_ready(Engine& engine, OpenAiService& service) {
  engine_ = &engine;
  service_ = &service;
  ready_ = true;
}

bool ApiRoutes::authorized(const HttpRequest& request) const {
  if (options_.api_key.empty()) return true;
  return constant_time_equal(request.header("Authorization"), "Bearer " + options_.api_key);
}

HttpReply ApiRoutes::handle(const HttpRequest& request) {
  try {
    return route(request);
  } catch (const ApiError& e) {
    return error_reply(e);
  } catch (const Error& e) {
    return error_reply(ApiError(400, e.what()));
  } catch (const std::bad_alloc&) {
    return error_reply(ApiError(500, "out of memory while handling the request", "", "internal_error"));
  } catch (const std::exception& e) {
    return error_reply(ApiError(500, std::string("internal error: ") + e.what(), "", "internal_error"));
  }
}

HttpReply ApiRoutes::route(const HttpRequest& request) {
  struct Route {
    std::string_view method, path;
    bool needs_key, needs_model;
  };
  static constexpr Route kRoutes[] = {
      {"GET", "/health", false, false},          {"GET", "/version", true, false},
      {"GET", "/metrics", true, false},          {"GET", "/v1/models", true, true},
      {"POST", "/v1/completions", true, true},   {"POST", "/v1/chat/completions", true, true},
      {"POST", "/tokenize", true, true},         {"POST", "/detokenize", true, true},
      {"POST", "/v2/chat", true, true},
  };
  const Route* found = nullptr;
  std::string allowed;
  for (const Route& r : kRoutes) {
    if (r.path != request.path) continue;
    if (r.method == request.method) found = &r;
    allowed += allowed.empty() ? std::string(r.method) : ", " + std::string(r.method);
  }
  if (!found) {
    if (allowed.empty()) throw ApiError(404, fmt::format("Not Found: {} {}", request.method, request.path), "", "not_found_error");
    HttpReply reply = error_reply(ApiError(405, fmt::format("Method Not Allowed: {} {} (allowed: {})", request.method,
                                                            request.path, allowed)));
    reply.headers.emplace_back("Allow", allowed);
    return reply;
  }
  const bool needs_key = found->needs_key && (found->path != "/metrics" || options_.metrics_need_api_key);
  if (needs_key && !authorized(request)) {
    throw ApiError(401, "Unauthorized: a valid API key is required (Authorization: Bearer ...)", "",
                   "authentication_error", "invalid_api_key");
  }
  if (found->path == "/health") {
    if (!ready_) throw ApiError(503, "the model is still loading", "", "service_unavailable");
    if (stopping_) throw ApiError(503, "the server is shutting down", "", "service_unavailable");
    HttpReply reply;
    reply.content_type.clear();
    return reply;
  }
  if (found->path == "/version") return json_reply(200, {{"version", TIDE_VERSION}});
  if (found->path == "/metrics") {
    if (ready_) service_->refresh_metrics(metrics_);
    HttpReply reply;
    reply.content_type = "text/plain; version=0.0.4; charset=utf-8";
    reply.body = metrics_.render();
    return reply;
  }
  if (!ready_) throw ApiError(503, "the model is still loading", "", "service_unavailable");
  if (found->path == "/v1/models") return json_reply(200, service_->models());
  if (found->path == "/tokenize") return json_reply(200, service_->tokenize(parse_tokenize_request(parse_body(request.body))));
  if (found->path == "/detokenize") {
    return json_reply(200, service_->detokenize(parse_detokenize_request(parse_body(request.body))));
  }
  if (found->path == "/v2/chat") return generation(request, ApiShape::kCohereChat);
  return generation(request, found->path == "/v1/chat/completions" ? ApiShape::kChat : ApiShape::kCompletion);
}

HttpReply ApiRoutes::generation(const HttpRequest& request, ApiShape shape) {
  if (stopping_) throw ApiError(503, "the server is shutting down", "", "service_unavailable");
  const nlohmann::ordered_json body = parse_body(request.body);
  GenerationJob job = shape == ApiShape::kCompletion ? service_->prepare_completion(parse_completion_request(body))
                      : shape == ApiShape::kChat     ? service_->prepare_chat(parse_chat_request(body))
                                                     : service_->prepare_chat(parse_cohere_chat_request(body), shape);
  const int64_t samples = static_cast<int64_t>(job.prompts.size()) * job.options.n;
  // Admission control: a request is refused rather than queued without bound.
  const int64_t pending = pending_samples_->fetch_add(samples) + samples;
  if (pending > options_.max_pending_samples) {
    pending_samples_->fetch_sub(samples);
    throw ApiError(429,
                   fmt::format("the server is busy: {} samples are waiting or running (at most {}); retry later",
                               pending - samples, options_.max_pending_samples),
                   "", "", "rate_limit_exceeded");
  }
  std::unique_ptr<GenerationRun> run;
  try {
    run = service_->start(std::move(job));
  } catch (...) {
    pending_samples_->fetch_sub(samples);
    throw;
  }
  const bool stream = run->job().stream;
  HttpReply reply;
  reply.source = std::make_shared<GenerationSource>(std::move(run), pending_samples_, samples);
  if (stream) {
    reply.content_type = "text/event-stream";
    reply.headers.emplace_back("Cache-Control", "no-cache");
  } else {
    reply.deferred = true;
  }
  return reply;
}

}  // namespace tide::server

// Server-sent events as OpenAI streams them: each chunk one "data: {json}\n\n" event, then "data: [DONE]\n\n".
// SseWriter formats events and hands them to a write function (the HTTP layer's sink); it remembers a failed
// write (the client went away) so the caller can cancel the request.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace tide::server {

// "data: <payload>\n\n".
std::string sse_event(std::string_view payload);
// "data: <compact json>\n\n" (invalid UTF-8 replaced).
std::string sse_json_event(const nlohmann::json& chunk);
// "event: <type>\ndata: <compact json>\n\n" (Cohere's typed stream events).
std::string sse_typed_event(std::string_view type, const nlohmann::ordered_json& event);
// "data: [DONE]\n\n".
std::string sse_done();

class SseWriter {
 public:
  // `write` returns false when the bytes could not be sent.
  explicit SseWriter(std::function<bool(std::string_view)> write) : write_(std::move(write)) {}

  // Sends one event; false (and every later call false) once a write failed.
  bool send(const nlohmann::json& chunk) { return send_raw(sse_json_event(chunk)); }
  bool send_done() { return send_raw(sse_done()); }
  bool failed() const { return failed_; }

 private:
  bool send_raw(const std::string& bytes);

  std::function<bool(std::string_view)> write_;
  bool failed_ = false;
};

}  // namespace tide::server

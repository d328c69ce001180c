#include "apps/tide/bench_serve/completion_stream.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace tide::bench {
namespace {

using nlohmann::json;

constexpr size_t kMaxErrorText = 1000;  // keeps a large error page from flooding the report

std::string clipped(std::string_view text) {
  if (text.size() <= kMaxErrorText) return std::string(text);
  return std::string(text.substr(0, kMaxErrorText)) + "...";
}

// The message of an OpenAI error object ({"error": {"message": ...}} or {"error": "..."}), else the text.
std::string error_message(const json& error) {
  if (error.is_object() && error.contains("message") && error["message"].is_string()) {
    return error["message"].get<std::string>();
  }
  if (error.is_string()) return error.get<std::string>();
  return error.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::optional<int64_t> integer_field(const json& object, const char* key) {
  if (!object.is_object() || !object.contains(key) || !object[key].is_number_integer()) return std::nullopt;
  return object[key].get<int64_t>();
}

}  // namespace

void CompletionStream::on_bytes(std::string_view bytes, double now_s) {
  if (record_.http_status != 200) {
    if (error_body_.size() < kMaxErrorText) error_body_.append(bytes.substr(0, kMaxErrorText));
    return;
  }
  parser_.feed(bytes, [&](std::string_view data) { on_event(data, now_s); });
}

void CompletionStream::on_event(std::string_view data, double now_s) {
  if (done_) return;
  if (data == "[DONE]") {
    done_ = true;
    return;
  }
  const json chunk = json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (chunk.is_discarded() || !chunk.is_object()) {
    set_error("a stream event that is not a JSON object: " + clipped(data));
    return;
  }
  if (chunk.contains("error")) {
    set_error("the stream reported an error: " + clipped(error_message(chunk["error"])));
    return;
  }
  if (chunk.contains("choices") && chunk["choices"].is_array() && !chunk["choices"].empty()) {
    record_.chunk_s.push_back(now_s);
    for (const json& choice : chunk["choices"]) {
      if (choice.is_object() && choice.contains("finish_reason") && choice["finish_reason"].is_string()) {
        record_.finish_reason = choice["finish_reason"].get<std::string>();
      }
    }
  }
  if (chunk.contains("usage") && chunk["usage"].is_object()) {
    const json& usage = chunk["usage"];
    if (const auto n = integer_field(usage, "completion_tokens")) {
      record_.output_tokens = *n;
      record_.usage_seen = true;
    }
    if (const auto n = integer_field(usage, "prompt_tokens")) record_.prompt_len = *n;
    if (usage.contains("prompt_tokens_details")) {
      if (const auto n = integer_field(usage["prompt_tokens_details"], "cached_tokens")) record_.cached_tokens = *n;
    }
  }
}

void CompletionStream::set_error(std::string message) {
  if (error_.empty()) error_ = std::move(message);
}

void CompletionStream::finish(double now_s, const std::string& transport_error) {
  if (record_.http_status == 200 && transport_error.empty()) {
    parser_.finish([&](std::string_view data) { on_event(data, now_s); });
  }
  record_.end_s = now_s;
  if (!record_.usage_seen) record_.output_tokens = static_cast<int64_t>(record_.chunk_s.size());
  std::string error;
  if (record_.http_status == 0) {
    error = "no response: " + (transport_error.empty() ? std::string("unknown error") : transport_error);
  } else if (record_.http_status != 200) {
    const json body = json::parse(error_body_, nullptr, false);
    const std::string message = !body.is_discarded() && body.is_object() && body.contains("error")
                                    ? error_message(body["error"])
                                    : error_body_;
    error = fmt::format("HTTP {}: {}", record_.http_status, clipped(message));
  } else if (!transport_error.empty()) {
    error = fmt::format("the connection broke after {} token chunks: {}", record_.chunk_s.size(), transport_error);
  } else if (!error_.empty()) {
    error = error_;
  } else if (record_.finish_reason == "error" || record_.finish_reason == "abort") {
    error = "finish_reason \"" + record_.finish_reason + "\"";
  } else if (!done_) {
    error = "the stream ended before data: [DONE]";
  } else if (record_.chunk_s.empty()) {
    error = "the stream carried no token chunk";
  }
  record_.success = error.empty();
  record_.error = std::move(error);
}

}  // namespace tide::bench

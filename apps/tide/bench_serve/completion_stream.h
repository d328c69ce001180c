// Reads one /v1/completions response into its RequestRecord: a streamed body (SSE chunks of OpenAI's
// text_completion objects, an optional usage chunk, "data: [DONE]") or an error body. Decides success: a
// request failed on an HTTP error status, a broken connection, a stream's {"error": ...} event, a chunk that is
// not JSON, finish_reason "error" or "abort", a stream without token chunks, or one that ended before [DONE].
// No sockets: the HTTP client feeds the bytes with their arrival times.
#pragma once

#include <string>
#include <string_view>

#include "apps/tide/bench_serve/request_record.h"
#include "apps/tide/bench_serve/sse_parser.h"

namespace tide::bench {

class CompletionStream {
 public:
  // `record` must outlive this object; its start_s and prompt_len are set by the caller.
  explicit CompletionStream(RequestRecord& record) : record_(record) {}

  // The response's status line arrived.
  void on_status(int http_status) { record_.http_status = http_status; }
  // Body bytes that arrived at `now_s` (seconds since the benchmark began).
  void on_bytes(std::string_view bytes, double now_s);
  // The response ended at `now_s`; `transport_error` is empty when the HTTP exchange completed, else what broke
  // (no connection, a read timeout, a reset). Sets the record's success, error and output_tokens.
  void finish(double now_s, const std::string& transport_error);

  bool done_seen() const { return done_; }

 private:
  void on_event(std::string_view data, double now_s);
  void set_error(std::string message);

  RequestRecord& record_;
  SseParser parser_;
  std::string error_body_;  // a non-200 response's body (its start)
  std::string error_;       // the first error the stream itself reported
  bool done_ = false;       // "data: [DONE]" arrived
};

}  // namespace tide::bench

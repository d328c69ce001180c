// Incremental parser of a text/event-stream body (the WHATWG server-sent events format that OpenAI-compatible
// servers stream): bytes in, in pieces split anywhere, each complete event's data out. Lines end in LF, CRLF or
// CR; "data:" lines (one optional space after the colon) of an event are joined by '\n'; a blank line ends the
// event; comments (":...") and other fields (event, id, retry) are skipped. No JSON here: see
// completion_stream.h.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace tide::bench {

class SseParser {
 public:
  using EventFn = std::function<void(std::string_view data)>;

  // Appends `bytes` and calls `on_event` with the data of each event they complete, in order.
  void feed(std::string_view bytes, const EventFn& on_event);
  // The body ended: an event left without its blank line, or a last line without its line end, is dispatched
  // when it has data (a server that closes right after "data: [DONE]" still ended its stream properly).
  void finish(const EventFn& on_event);

 private:
  void end_line(const EventFn& on_event);

  std::string line_;         // the current line, without its line end
  std::string data_;         // the current event's data lines, joined by '\n'
  bool has_data_ = false;    // the current event had a data line (its data may be empty)
  bool after_cr_ = false;    // the last byte was '\r': a '\n' next belongs to the same line end
};

}  // namespace tide::bench

#include "apps/tide/bench_serve/sse_parser.h"

namespace tide::bench {

void SseParser::feed(std::string_view bytes, const EventFn& on_event) {
  for (const char c : bytes) {
    if (after_cr_) {
      after_cr_ = false;
      if (c == '\n') continue;
    }
    if (c == '\r' || c == '\n') {
      after_cr_ = c == '\r';
      end_line(on_event);
    } else {
      line_.push_back(c);
    }
  }
}

void SseParser::finish(const EventFn& on_event) {
  if (!line_.empty()) end_line(on_event);
  if (has_data_) end_line(on_event);  // the blank line that never came
  after_cr_ = false;
}

void SseParser::end_line(const EventFn& on_event) {
  if (line_.empty()) {
    if (has_data_) on_event(data_);
    data_.clear();
    has_data_ = false;
    return;
  }
  const std::string_view line = line_;
  if (line.front() != ':') {
    const size_t colon = line.find(':');
    const std::string_view field = line.substr(0, colon);
    std::string_view value = colon == std::string_view::npos ? std::string_view() : line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    if (field == "data") {
      if (has_data_) data_.push_back('\n');
      data_.append(value);
      has_data_ = true;
    }
  }
  line_.clear();
}

}  // namespace tide::bench

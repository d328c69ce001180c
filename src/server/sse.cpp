#include "server/sse.h"

#include "server/api_error.h"

namespace tide::server {

std::string sse_event(std::string_view payload) {
  std::string out;
  out.reserve(payload.size() + 8);
  out += "data: ";
  out += payload;
  out += "\n\n";
  return out;
}

std::string sse_json_event(const nlohmann::json& chunk) { return sse_event(std::string_view(dump_json(chunk))); }

std::string sse_done() { return sse_event(std::string_view("[DONE]")); }

bool SseWriter::send_raw(const std::string& bytes) {
  if (failed_) return false;
  if (!write_(bytes)) failed_ = true;
  return !failed_;
}

}  // namespace tide::server

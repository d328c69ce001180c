#include "server/sse.h"

#include "server/api_error.h"
#include "chat/json_exact.h"

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

std::string sse_typed_event(std::string_view type, const nlohmann::ordered_json& event) {
  std::string out = "event: ";
  out += type;
  out += "\n";
  out += sse_event(dump_json_exact(event));
  return out;
}

std::string sse_done() { return sse_event(std::string_view("[DONE]")); }

bool SseWriter::send_raw(const std::string& bytes) {
  if (failed_) return false;
  if (!write_(bytes)) failed_ = true;
  return !failed_;
}

}  // namespace tide::server

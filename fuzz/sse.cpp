// Fuzzes the benchmark client's server-sent-events parser (apps/tide/bench_serve: SseParser, CompletionStream)
// with response bodies. The input's first byte picks the HTTP status (200 or an error) and how the body is cut
// into pieces; the rest is the body. Events must not depend on where the body was cut; an event that holds
// JSON, formatted again by the server's SSE writer (server/sse.h), must parse back to the same JSON text; the
// completion stream's verdict must be consistent.
#include "server/sse.h"

#include <cstdint>
#include <string>
#include <vector>

#include "apps/tide/bench_serve/completion_stream.h"
#include "apps/tide/bench_serve/sse_parser.h"
#include "fuzz/fuzz_util.h"

namespace {

using tide::bench::SseParser;

// The body cut into pieces of 1 to 2^k bytes (k from `mode`), the lengths drawn from a generator seeded by it.
std::vector<std::string_view> pieces(std::string_view body, uint8_t mode) {
  std::vector<std::string_view> out;
  uint32_t state = 0x9e3779b9u ^ mode;
  const uint32_t max_len = 1u << (mode & 7);
  while (!body.empty()) {
    state ^= state << 13, state ^= state >> 17, state ^= state << 5;
    const size_t n = std::min<size_t>(body.size(), 1 + state % max_len);
    out.push_back(body.substr(0, n));
    body.remove_prefix(n);
  }
  return out;
}

std::vector<std::string> events_of(const std::vector<std::string_view>& parts) {
  std::vector<std::string> events;
  SseParser parser;
  const auto collect = [&](std::string_view data) { events.emplace_back(data); };
  for (std::string_view part : parts) parser.feed(part, collect);
  parser.finish(collect);
  return events;
}

// An event's JSON, written by the server's SSE formatting and parsed again, is the same compact JSON text.
void check_server_round_trip(const std::string& data) {
  const nlohmann::json chunk = nlohmann::json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (chunk.is_discarded()) return;
  const std::vector<std::string> back = events_of({tide::server::sse_json_event(chunk)});
  FUZZ_CHECK(back.size() == 1 && back[0] == chunk.dump());
}

void check_completion_stream(const std::vector<std::string_view>& parts, int status) {
  tide::bench::RequestRecord record;
  tide::bench::CompletionStream stream(record);
  stream.on_status(status);
  double now = 0;
  for (std::string_view part : parts) stream.on_bytes(part, now += 0.001);
  stream.finish(now + 0.001, "");
  FUZZ_CHECK(record.success == record.error.empty());
  FUZZ_CHECK(!record.success || (status == 200 && stream.done_seen() && !record.chunk_s.empty()));
  FUZZ_CHECK(record.output_tokens >= 0);
  for (size_t i = 1; i < record.chunk_s.size(); ++i) FUZZ_CHECK(record.chunk_s[i - 1] <= record.chunk_s[i]);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  const std::string_view body = tide::fuzz::as_text(data + 1, size - 1);
  const std::vector<std::string> whole = events_of({body});
  const std::vector<std::string_view> parts = pieces(body, mode);
  FUZZ_CHECK(events_of(parts) == whole);
  for (const std::string& event : whole) check_server_round_trip(event);
  check_completion_stream(parts, (mode & 0x80) ? 500 : 200);
  return 0;
}

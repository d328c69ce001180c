// tide bench serve's reading of a streamed completion: the SSE parser on bodies split at every byte boundary,
// and CompletionStream's record of a stream (token chunk times, usage, finish reason) and of every way a request
// fails (HTTP error, error event, finish_reason "error", broken connection, no [DONE]).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "apps/tide/bench_serve/completion_stream.h"
#include "apps/tide/bench_serve/sse_parser.h"

namespace tide::bench {
namespace {

// Two token chunks (CRLF line ends on the second), a comment, the usage chunk and [DONE], as OpenAI streams.
const std::string kStream =
    "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\"Hi\","
    "\"finish_reason\":null}]}\n\n"
    ": a comment, as some servers send to keep the connection open\n\n"
    "data: {\"id\":\"cmpl-1\",\"choices\":[{\"index\":0,\"text\":\" there\",\"finish_reason\":\"length\"}]}\r\n\r\n"
    "data: {\"id\":\"cmpl-1\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2,"
    "\"total_tokens\":7,\"prompt_tokens_details\":{\"cached_tokens\":3}}}\n\n"
    "data: [DONE]\n\n";

std::vector<std::string> parse_in_pieces(const std::string& body, const std::vector<size_t>& cuts) {
  SseParser parser;
  std::vector<std::string> events;
  const auto collect = [&](std::string_view data) { events.emplace_back(data); };
  size_t pos = 0;
  for (size_t cut : cuts) {
    parser.feed(std::string_view(body).substr(pos, cut - pos), collect);
    pos = cut;
  }
  parser.feed(std::string_view(body).substr(pos), collect);
  parser.finish(collect);
  return events;
}

TEST(BenchSse, SameEventsWhereverTheBodyIsSplit) {
  const std::vector<std::string> whole = parse_in_pieces(kStream, {});
  ASSERT_EQ(whole.size(), 4u);
  EXPECT_EQ(whole[0].rfind("{\"id\":\"cmpl-1\",\"object\"", 0), 0u);
  EXPECT_EQ(whole[3], "[DONE]");
  for (size_t cut = 0; cut <= kStream.size(); ++cut) {
    EXPECT_EQ(parse_in_pieces(kStream, {cut}), whole) << "split at byte " << cut;
  }
  std::vector<size_t> every_byte;
  for (size_t i = 1; i < kStream.size(); ++i) every_byte.push_back(i);
  EXPECT_EQ(parse_in_pieces(kStream, every_byte), whole);
}

TEST(BenchSse, FieldsAndLineEnds) {
  // Multi-line data joined by '\n', "data" without a colon is an empty line, other fields skipped, CR alone ends
  // a line, an event without data is not dispatched.
  const std::string body = "event: x\nid: 7\ndata: a\ndata:b\ndata\n\nretry: 5\n\ndata:  two spaces\r\rdata: c";
  EXPECT_EQ(parse_in_pieces(body, {}), (std::vector<std::string>{"a\nb\n", " two spaces", "c"}));
  // Without finish(), the unterminated last event stays pending.
  SseParser parser;
  std::vector<std::string> events;
  parser.feed("data: [DONE]", [&](std::string_view d) { events.emplace_back(d); });
  EXPECT_TRUE(events.empty());
  parser.finish([&](std::string_view d) { events.emplace_back(d); });
  EXPECT_EQ(events, (std::vector<std::string>{"[DONE]"}));
}

// Feeds `body` with status 200 to a fresh record sent at 0.5: bytes before `cut` arrive at 1, the rest at 2.
RequestRecord stream_record(const std::string& body, size_t cut, const std::string& transport_error = "") {
  RequestRecord r;
  r.prompt_len = 4;
  r.start_s = 0.5;
  CompletionStream stream(r);
  stream.on_status(200);
  stream.on_bytes(std::string_view(body).substr(0, cut), 1.0);
  stream.on_bytes(std::string_view(body).substr(cut), 2.0);
  stream.finish(2.5, transport_error);
  return r;
}

TEST(BenchSse, RecordsAStreamSplitAnywhere) {
  const size_t first_event_end = kStream.find("\n\n") + 2;
  for (size_t cut = 0; cut <= kStream.size(); ++cut) {
    const RequestRecord r = stream_record(kStream, cut);
    ASSERT_TRUE(r.success) << r.error << " (split at " << cut << ")";
    EXPECT_EQ(r.http_status, 200);
    EXPECT_EQ(r.output_tokens, 2);
    EXPECT_TRUE(r.usage_seen);
    EXPECT_EQ(r.prompt_len, 5);  // the usage chunk's count replaces the one sent
    EXPECT_EQ(r.cached_tokens, 3);
    EXPECT_EQ(r.finish_reason, "length");
    EXPECT_EQ(r.end_s, 2.5);
    ASSERT_EQ(r.chunk_s.size(), 2u);
    // A chunk is timed when its event's last byte arrives.
    EXPECT_EQ(r.chunk_s[0], cut >= first_event_end ? 1.0 : 2.0) << cut;
  }
  const RequestRecord r = stream_record(kStream, kStream.find("data: {\"id\":\"cmpl-1\",\"choices\":[{"));
  EXPECT_DOUBLE_EQ(r.ttft_s(), 0.5);
  EXPECT_DOUBLE_EQ(r.e2el_s(), 1.5);
  EXPECT_EQ(r.itls_s(), (std::vector<double>{1.0}));
  EXPECT_DOUBLE_EQ(*r.tpot_s(), 1.0);
}

TEST(BenchSse, WithoutUsageTheChunksAreCounted) {
  const std::string body =
      "data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"choices\":[{\"text\":\"\"}]}\n\n"
      "data: {\"choices\":[{\"text\":\"c\",\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
  const RequestRecord r = stream_record(body, 0);
  EXPECT_TRUE(r.success) << r.error;
  EXPECT_FALSE(r.usage_seen);
  EXPECT_EQ(r.output_tokens, 3);  // an empty text is still a token (a special token, held-back bytes)
  EXPECT_EQ(r.prompt_len, 4);
  EXPECT_FALSE(r.cached_tokens.has_value());
  EXPECT_EQ(r.finish_reason, "stop");
}

TEST(BenchSse, FailuresAreRecordedNotThrown) {
  const std::string chunk = "data: {\"choices\":[{\"text\":\"a\",\"finish_reason\":null}]}\n\n";
  // An error event in the stream (vLLM's way to report a failure after the 200).
  RequestRecord r = stream_record(chunk + "data: {\"error\":{\"message\":\"boom\",\"type\":\"InternalServerError\"}}\n\n"
                                          "data: [DONE]\n\n", 0);
  EXPECT_FALSE(r.success);
  EXPECT_NE(r.error.find("boom"), std::string::npos) << r.error;
  // finish_reason "error" (tide's way).
  r = stream_record("data: {\"choices\":[{\"text\":\"\",\"finish_reason\":\"error\"}]}\n\ndata: [DONE]\n\n", 0);
  EXPECT_FALSE(r.success);
  EXPECT_EQ(r.finish_reason, "error");
  EXPECT_NE(r.error.find("error"), std::string::npos);
  // The connection broke mid-stream.
  r = stream_record(chunk, 0, "Read");
  EXPECT_FALSE(r.success);
  EXPECT_EQ(r.chunk_s.size(), 1u);
  EXPECT_NE(r.error.find("connection broke after 1 token chunks: Read"), std::string::npos) << r.error;
  // The body ended cleanly but without [DONE].
  r = stream_record(chunk, 0);
  EXPECT_FALSE(r.success);
  EXPECT_NE(r.error.find("[DONE]"), std::string::npos) << r.error;
  // [DONE] without any token chunk.
  r = stream_record("data: [DONE]\n\n", 0);
  EXPECT_FALSE(r.success);
  EXPECT_NE(r.error.find("no token chunk"), std::string::npos) << r.error;
  // A chunk that is not JSON.
  r = stream_record("data: {\"choices\": [\n\ndata: [DONE]\n\n", 0);
  EXPECT_FALSE(r.success);
  EXPECT_NE(r.error.find("not a JSON object"), std::string::npos) << r.error;
}

TEST(BenchSse, HttpErrorsAndNoResponse) {
  RequestRecord r;
  CompletionStream stream(r);
  stream.on_status(400);
  stream.on_bytes("{\"error\":{\"message\":\"prompt too long\",\"type\":\"BadRequestError\",", 0.1);
  stream.on_bytes("\"param\":\"prompt\",\"code\":400}}", 0.2);
  stream.finish(0.3, "");
  EXPECT_FALSE(r.success);
  EXPECT_EQ(r.http_status, 400);
  EXPECT_EQ(r.error, "HTTP 400: prompt too long");
  EXPECT_TRUE(r.chunk_s.empty());

  RequestRecord plain;
  CompletionStream plain_stream(plain);
  plain_stream.on_status(502);
  plain_stream.on_bytes("Bad Gateway", 0.1);
  plain_stream.finish(0.2, "");
  EXPECT_EQ(plain.error, "HTTP 502: Bad Gateway");

  RequestRecord none;
  CompletionStream none_stream(none);
  none_stream.finish(0.2, "Connection");
  EXPECT_FALSE(none.success);
  EXPECT_EQ(none.http_status, 0);
  EXPECT_EQ(none.error, "no response: Connection");
}

}  // namespace
}  // namespace tide::bench

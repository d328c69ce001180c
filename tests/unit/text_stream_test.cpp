// TextStream: incremental text with stop strings. The text of every push and finish adds up to the decoded
// ids (no stop) or to the decoded text up to the earliest stop string (with one), for stop strings that start
// and end anywhere in the token texts; nothing emitted is ever taken back; UTF-8 characters are never split.
#include <gtest/gtest.h>

#include <random>

#include "runtime/text_stream.h"
#include "tokenizer_test_util.h"

namespace tide {
namespace {

using test::kTinyDir;

Tokenizer tiny() { return Tokenizer::from_dir(kTinyDir); }

// Bytes of whole characters the first k ids decode to (an unfinished character at the end not counted).
size_t completed_size(const Tokenizer& tok, const std::vector<int32_t>& ids, size_t k) {
  StreamingDecoder d(tok, /*skip_special_tokens=*/true);
  size_t n = 0;
  for (size_t i = 0; i < k; ++i) n += d.push(ids[i]).size();
  return n;
}

// Streams `ids`; returns the emitted text and whether a stop ended it (and after how many ids).
struct Streamed {
  std::string text;
  bool stopped = false;
  size_t consumed = 0;
};
Streamed stream(const Tokenizer& tok, const std::vector<int32_t>& ids, std::vector<std::string> stops,
                bool include = false) {
  TextStream s(tok, std::move(stops), include, /*skip_special_tokens=*/true);
  Streamed out;
  for (int32_t id : ids) {
    ++out.consumed;
    const TextStream::Piece p = s.push(id);
    EXPECT_TRUE((utf8::find_invalid(p.text) == utf8::kValid)) << "a piece splits a character";
    out.text += p.text;
    if (p.stopped) {
      out.stopped = true;
      EXPECT_TRUE(s.push(id).text.empty());  // nothing after a stop
      EXPECT_TRUE(s.finish().empty());
      EXPECT_EQ(s.text(), out.text);
      return out;
    }
  }
  out.text += s.finish();
  EXPECT_EQ(s.text(), out.text);
  return out;
}

TEST(TextStream, WithoutStopsItIsTheDecodedText) {
  const Tokenizer tok = tiny();
  const std::vector<int32_t> ids = tok.encode("Hello world, naïve café 東京 ok", /*add_special_tokens=*/false);
  EXPECT_EQ(stream(tok, ids, {}).text, tok.decode(ids, true));
}

TEST(TextStream, RandomStopStringsAnywhereInTheText) {
  const Tokenizer tok = tiny();
  const std::string text = "The quick brown fox jumps over the lazy dog; then it naps. Über straße, 東京タワー!";
  const std::vector<int32_t> ids = tok.encode(text, /*add_special_tokens=*/false);
  const std::string full = tok.decode(ids, true);
  ASSERT_EQ(full, text);
  std::mt19937 rng(3);
  for (int k = 0; k < 300; ++k) {
    size_t begin = rng() % full.size(), len = 1 + rng() % 12;
    while (begin > 0 && (static_cast<unsigned char>(full[begin]) & 0xC0) == 0x80) --begin;  // whole characters
    std::string stop = full.substr(begin, len);
    while (!stop.empty() && !(utf8::find_invalid(stop) == utf8::kValid)) stop.pop_back();
    if (stop.empty()) continue;
    const bool include = rng() % 2;
    const size_t first = full.find(stop);
    const Streamed s = stream(tok, ids, {"zzzz-not-there", stop}, include);
    ASSERT_TRUE(s.stopped) << stop;
    EXPECT_EQ(s.text, full.substr(0, include ? first + stop.size() : first)) << "stop '" << stop << "'";
    // Generation ends at the token that completed the match.
    EXPECT_LT(completed_size(tok, ids, s.consumed - 1), first + stop.size()) << stop;
    EXPECT_GE(completed_size(tok, ids, s.consumed), first + stop.size()) << stop;
  }
}

TEST(TextStream, TheEarliestMatchWinsAndTextIsHeldBackOnlyAsLongAsNeeded) {
  const Tokenizer tok = tiny();
  const std::vector<int32_t> ids = tok.encode("abc def ghi", false);
  EXPECT_EQ(stream(tok, ids, {"ghi", "c d"}).text, "ab");
  EXPECT_EQ(stream(tok, ids, {"ghi", "c d"}, true).text, "abc d");
  // With a 3-byte stop string, at most 2 bytes stay back after each push.
  TextStream s(tok, {"xyz"}, false, true);
  std::string shown;
  for (size_t i = 0; i < ids.size(); ++i) {
    shown += s.push(ids[i]).text;
    EXPECT_LE(completed_size(tok, ids, i + 1) - shown.size(), 2u);
  }
  EXPECT_EQ(shown + s.finish(), "abc def ghi");
  EXPECT_THROW(TextStream(tok, {""}, false, true), Error);
}

TEST(TextStream, MayStopFalseDefersTheSearch) {
  const Tokenizer tok = tiny();
  const std::vector<int32_t> ids = tok.encode("one two three two", false);
  // Never allowed to stop: the whole text.
  EXPECT_EQ([&] {
    TextStream s(tok, {"two"}, false, true);
    std::string text;
    for (int32_t id : ids) text += s.push(id, false).text;
    return text + s.finish();
  }(), "one two three two");
  // Allowed from the token after which the first "two" is out of the held-back bytes: the second one stops.
  size_t from = 0;
  while (completed_size(tok, ids, from) < std::string("one two").size() + 2) ++from;
  TextStream s(tok, {"two"}, false, true);
  std::string text;
  for (size_t i = 0; i < ids.size(); ++i) {
    const TextStream::Piece p = s.push(ids[i], /*may_stop=*/i >= from);
    text += p.text;
    if (p.stopped) break;
  }
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(text, "one two three ");
}

// A long stop string holds back as many bytes; each push then looks for the stop strings only where they could
// end in its new text (the held-back bytes were searched before), so many short stops beside a long one cost
// no more than that. No match may be missed: the first to complete still ends the text, and one that completed
// while may_stop was false is found once it is true.
TEST(TextStream, ShortStopsBesideALongOneAreSearchedOnlyInNewText) {
  const Tokenizer tok = tiny();
  const std::vector<int32_t> ids = tok.encode("alpha beta gamma delta epsilon", false);
  std::vector<std::string> stops = {std::string(200, 'x'), "gamma", "ta g"};
  for (int i = 0; i < 50; ++i) stops.push_back("q" + std::to_string(i));
  EXPECT_EQ(stream(tok, ids, stops).text, "alpha be");
  EXPECT_EQ(stream(tok, ids, {std::string(200, 'x'), "lon"}).text, "alpha beta gamma delta epsi");
  TextStream s(tok, {std::string(200, 'x'), "beta"}, false, true);
  std::string text;
  for (size_t i = 0; i < ids.size(); ++i) text += s.push(ids[i], /*may_stop=*/i + 1 == ids.size()).text;
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(text, "alpha ");
}

}  // namespace
}  // namespace tide

// Properties of a loaded tokenizer that the tokenizer fuzz targets check on fuzzed text and ids: encoding valid
// UTF-8 works and its ids decode; StreamingDecoder's pieces add up to decode(); TextStream never emits a stop
// string and emits a prefix of the decoded text.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "runtime/text_stream.h"
#include "tokenizer/streaming_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace tide::fuzz {

// Ids read from raw bytes (two bytes each, little-endian) and folded into [0, vocab_size + 2): mostly known
// ids, a few unknown ones, which decode() must refuse cleanly.
inline std::vector<int32_t> ids_from_bytes(std::string_view bytes, int32_t vocab_size) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 1 < bytes.size(); i += 2) {
    const auto v = static_cast<int32_t>(static_cast<uint8_t>(bytes[i]) | (static_cast<uint8_t>(bytes[i + 1]) << 8));
    ids.push_back(v % (vocab_size + 2));
  }
  return ids;
}

// Decodes `ids` with decode() and with a StreamingDecoder: the same text, or both refuse an unknown id.
inline void check_streaming(const Tokenizer& tokenizer, const std::vector<int32_t>& ids, bool skip_special) {
  std::string whole;
  if (!accepted([&] { whole = tokenizer.decode(ids, skip_special); })) {
    bool unknown = false;
    for (int32_t id : ids) unknown = unknown || !accepted([&] { (void)tokenizer.id_to_token(id); });
    FUZZ_CHECK(unknown);  // decode() refuses only unknown ids
    return;
  }
  FUZZ_CHECK(utf8::find_invalid(whole) == utf8::kValid);
  StreamingDecoder decoder(tokenizer, skip_special);
  std::string pieces;
  for (int32_t id : ids) {
    const std::string piece = decoder.push(id);
    FUZZ_CHECK(utf8::find_invalid(piece) == utf8::kValid);
    pieces += piece;
  }
  pieces += decoder.finish();
  FUZZ_CHECK(pieces == whole);
}

// What a TextStream with `stops` emits for `ids`, the slow way: after each token the whole text so far is searched
// for every stop string, and the earliest match (then the longest) ends it.
inline std::string reference_stream(const Tokenizer& tokenizer, const std::vector<int32_t>& ids,
                                    const std::vector<std::string>& stops) {
  StreamingDecoder decoder(tokenizer, /*skip_special_tokens=*/true);
  std::string text;
  for (int32_t id : ids) {
    text += decoder.push(id);
    size_t best = std::string::npos, best_len = 0;
    for (const std::string& stop : stops) {
      const size_t at = text.find(stop);
      if (at != std::string::npos && (at < best || (at == best && stop.size() > best_len)))
        best = at, best_len = stop.size();
    }
    if (best != std::string::npos) return text.substr(0, best);
  }
  return text + decoder.finish();
}

// Streams `ids` through a TextStream with `stops`: it emits what reference_stream() does; the emitted text is a
// prefix of decode() and holds no stop string; without a stop it is all of decode(); with one, decode()
// continues with a stop string there.
// Only valid UTF-8 stop strings are used, as the server passes them (request bodies are valid UTF-8), and none
// holding U+FFFD: finish() may make one of an unfinished character, and no stop string is looked for then.
inline void check_text_stream(const Tokenizer& tokenizer, const std::vector<int32_t>& ids,
                              std::vector<std::string> stops) {
  std::erase_if(stops, [](const std::string& s) {
    return utf8::find_invalid(s) != utf8::kValid || s.find("\xEF\xBF\xBD") != std::string::npos;
  });
  std::string whole;
  if (!accepted([&] { whole = tokenizer.decode(ids, true); })) return;
  TextStream stream(tokenizer, stops, /*include_stop=*/false, /*skip_special_tokens=*/true);
  std::string emitted;
  for (int32_t id : ids) {
    const TextStream::Piece piece = stream.push(id);
    emitted += piece.text;
    if (piece.stopped) break;
  }
  if (!stream.stopped()) emitted += stream.finish();
  FUZZ_CHECK(emitted == stream.text());
  // The reference's work grows with ids x stops x text: compared where that stays small (most fuzzed inputs).
  if (ids.size() * stops.size() * whole.size() <= 20'000'000)
    FUZZ_CHECK(emitted == reference_stream(tokenizer, ids, stops));
  FUZZ_CHECK(whole.compare(0, emitted.size(), emitted) == 0);
  // No stop string lies inside the emitted text. (One may start in it: the stream ends at the first stop string
  // to complete, as vLLM does, so a longer one that began earlier but completes later does not count.)
  for (const std::string& stop : stops) FUZZ_CHECK(emitted.find(stop) == std::string::npos);
  if (!stream.stopped()) {
    FUZZ_CHECK(emitted == whole);
  } else {
    bool stop_follows = false;
    for (const std::string& stop : stops)
      stop_follows = stop_follows || whole.compare(emitted.size(), stop.size(), stop) == 0;
    FUZZ_CHECK(stop_follows);
  }
}

// Encodes `text` and checks that the ids decode. Invalid UTF-8 is always refused; valid text is refused only
// where `may_refuse` (a fuzzed vocabulary may lack a character, with no unk_token to stand for it).
inline std::vector<int32_t> check_encode(const Tokenizer& tokenizer, std::string_view text, bool may_refuse = false) {
  std::vector<int32_t> ids;
  const bool valid = utf8::find_invalid(text) == utf8::kValid;
  const bool encoded = accepted([&] { ids = tokenizer.encode(text, /*add_special_tokens=*/true); });
  FUZZ_CHECK(encoded ? valid : !valid || may_refuse);
  if (!encoded) return ids;
  for (int32_t id : ids) FUZZ_CHECK(id >= 0 && id < tokenizer.vocab_size());
  check_streaming(tokenizer, ids, false);
  check_streaming(tokenizer, ids, true);
  return ids;
}

}  // namespace tide::fuzz

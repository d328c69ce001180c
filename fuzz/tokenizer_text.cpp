// Fuzzes encoding and decoding with a real tokenizer (tests/fixtures/cohere2-tiny, byte-level BPE built like
// Cohere's). The input is a text, optionally followed by a NUL, raw token ids (two bytes each), another NUL and
// stop strings separated by 0x1F. The text encodes exactly when it is valid UTF-8 and its ids decode; ids decode
// in one go and streamed to the same text; a TextStream with the stop strings stops at the first one.
#include "fuzz/tokenizer_checks.h"

namespace {

const tide::Tokenizer& fixture_tokenizer() {
  static const tide::Tokenizer tokenizer = tide::Tokenizer::from_dir(TIDE_FIXTURES_DIR "/cohere2-tiny");
  return tokenizer;
}

std::vector<std::string> split_stops(std::string_view text) {
  std::vector<std::string> stops;
  while (!text.empty()) {
    const size_t end = std::min(text.find('\x1f'), text.size());
    if (end > 0) stops.emplace_back(text.substr(0, end));
    text.remove_prefix(std::min(end + 1, text.size()));
  }
  return stops;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const tide::Tokenizer& tokenizer = fixture_tokenizer();
  const auto [text, rest] = tide::fuzz::split_at_nul(tide::fuzz::as_text(data, size));
  const auto [id_bytes, stop_text] = tide::fuzz::split_at_nul(rest);
  const std::vector<int32_t> encoded = tide::fuzz::check_encode(tokenizer, text);
  const std::vector<int32_t> raw = tide::fuzz::ids_from_bytes(id_bytes, tokenizer.vocab_size());
  tide::fuzz::check_streaming(tokenizer, raw, false);
  tide::fuzz::check_streaming(tokenizer, raw, true);
  const std::vector<std::string> stops = split_stops(stop_text);
  tide::fuzz::check_text_stream(tokenizer, encoded, stops);
  tide::fuzz::check_text_stream(tokenizer, raw, stops);
  return 0;
}

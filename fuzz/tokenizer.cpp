// Fuzzes tokenizer loading (Tokenizer::from_json, tokenizer/tokenizer.h). The input is tokenizer.json's text,
// optionally followed by a NUL, tokenizer_config.json's text, another NUL and a text to encode. A tokenizer that
// loads must encode that text (or a fixed sample) or refuse it with an error, decode the first ids of its
// vocabulary, and refuse unknown ids cleanly.
#include <algorithm>

#include "fuzz/tokenizer_checks.h"

namespace {

constexpr std::string_view kSample = "Hello, world! 12345 <BOS_TOKEN>naïve café\n\t  end";

void exercise(const tide::Tokenizer& tokenizer, std::string_view text) {
  const int32_t vocab = tokenizer.vocab_size();
  FUZZ_CHECK(vocab >= 0);
  (void)tokenizer.bos_id();
  (void)tokenizer.eos_id();
  (void)tokenizer.add_bos_token();
  tide::fuzz::check_encode(tokenizer, text.empty() ? kSample : text, /*may_refuse=*/true);
  // The first ids of the vocabulary, one unknown id past its end, and a negative one.
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < std::min(vocab, 512); ++id) ids.push_back(id);
  tide::fuzz::check_streaming(tokenizer, ids, false);
  tide::fuzz::check_streaming(tokenizer, ids, true);
  tide::fuzz::check_streaming(tokenizer, {vocab}, false);
  tide::fuzz::check_streaming(tokenizer, {-1}, false);
  for (int32_t id : ids) {
    tide::fuzz::accepted([&] {
      const std::string& token = tokenizer.id_to_token(id);
      FUZZ_CHECK(tokenizer.token_to_id(token).has_value());
    });
    (void)tokenizer.is_special(id);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = tide::fuzz::split_at_nul(tide::fuzz::as_text(data, size));  // tokenizer.json, the rest
  const auto rest = tide::fuzz::split_at_nul(parts.second);                      // config, text
  tide::fuzz::accepted([&] {
    const tide::Tokenizer tokenizer = tide::Tokenizer::from_json(parts.first, rest.first);
    exercise(tokenizer, rest.second);
  });
  return 0;
}

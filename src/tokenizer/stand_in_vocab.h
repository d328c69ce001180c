// The stand-in tokenizer's vocabulary (Tokenizer::stand_in): what a model folder without tokenizer files
// (a config-only folder served with --load-format dummy) tokenizes with, so that token-id prompts work and every
// id the model generates decodes to some text. Ids 0-255 are the bytes 0x00-0xFF; every other id N below the
// vocabulary size is the text "<tok_N>" (N in decimal, no leading zeros), which encode() reads back as N.
// Non-goals: resembling the model's real tokenizer, special tokens, chat templates.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tide::stand_in_vocab {

// Ids below this are bytes (of those below the vocabulary size).
inline constexpr int32_t kNumByteIds = 256;

// What id contributes to decoded text: its byte, or "<tok_N>".
std::string token_text(int32_t id);
// The id's token string (Tokenizer::id_to_token): "<0xHH>" for a byte, else "<tok_N>".
std::string token_name(int32_t id);
// The id of a token string of token_name()'s form below `vocab_size`, or nullopt.
std::optional<int32_t> parse_name(std::string_view token, int32_t vocab_size);
// The ids of `text`: each "<tok_N>" with 256 <= N < vocab_size as N, every other byte as its id. Throws
// tide::Error for a byte whose id is not below vocab_size (vocabularies of fewer than 256 ids).
std::vector<int32_t> encode(std::string_view text, int32_t vocab_size);

}  // namespace tide::stand_in_vocab

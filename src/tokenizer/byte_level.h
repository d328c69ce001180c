// GPT-2 byte-level building blocks shared by the ByteLevel pre-tokenizer and the ByteLevel decoder: the
// byte <-> printable-character table, the GPT-2 splitting regex (PCRE2), and HF's per-token byte decoding.
// Non-goals: offsets (tide never needs them), custom regexes.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tide::byte_level {

// Appends `text` with every byte replaced by its GPT-2 character (UTF-8 encoded).
void encode_bytes(std::string_view text, std::string& out);

// Appends the bytes that HF's ByteLevel decoder produces for one token: each character mapped back to its
// byte when all characters of the token are in the table, otherwise the token's own UTF-8 bytes.
void decode_token(std::string_view token, std::string& out);

// Appends the pieces of `text` (valid UTF-8) cut by the GPT-2 regex
// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ (HF "Isolated" behaviour:
// matches and any gaps between them both become pieces). Thread-safe.
void split_gpt2(std::string_view text, std::vector<std::string_view>& out);

}  // namespace tide::byte_level

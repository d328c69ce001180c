#include "tokenizer/stand_in_vocab.h"

#include <charconv>

#include <fmt/format.h>

#include "core/error.h"

namespace tide::stand_in_vocab {
namespace {

constexpr std::string_view kPrefix = "<tok_";

// The placeholder id at the start of `text` ("<tok_N>", canonical decimal, 256 <= N < vocab_size) and its
// length, or nullopt.
std::optional<std::pair<int32_t, size_t>> placeholder_at(std::string_view text, int32_t vocab_size) {
  if (!text.starts_with(kPrefix)) return std::nullopt;
  const std::string_view rest = text.substr(kPrefix.size());
  int32_t id = 0;
  const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), id);
  const size_t digits = static_cast<size_t>(end - rest.data());
  if (ec != std::errc() || digits == 0 || rest[0] == '0' || digits >= rest.size() || rest[digits] != '>') {
    return std::nullopt;
  }
  if (id < kNumByteIds || id >= vocab_size) return std::nullopt;
  return std::pair<int32_t, size_t>{id, kPrefix.size() + digits + 1};
}

}  // namespace

std::string token_text(int32_t id) {
  if (id < kNumByteIds) return std::string(1, static_cast<char>(id));
  return fmt::format("<tok_{}>", id);
}

std::string token_name(int32_t id) {
  if (id < kNumByteIds) return fmt::format("<0x{:02X}>", id);
  return fmt::format("<tok_{}>", id);
}

std::optional<int32_t> parse_name(std::string_view token, int32_t vocab_size) {
  if (const auto p = placeholder_at(token, vocab_size); p && p->second == token.size()) return p->first;
  unsigned value = 0;
  if (token.size() == 6 && token.starts_with("<0x") && token.back() == '>') {
    const auto [end, ec] = std::from_chars(token.data() + 3, token.data() + 5, value, 16);
    if (ec == std::errc() && end == token.data() + 5 && static_cast<int32_t>(value) < vocab_size) {
      return static_cast<int32_t>(value);
    }
  }
  return std::nullopt;
}

std::vector<int32_t> encode(std::string_view text, int32_t vocab_size) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < text.size();) {
    if (const auto p = placeholder_at(text.substr(i), vocab_size)) {
      ids.push_back(p->first);
      i += p->second;
      continue;
    }
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte >= vocab_size) {
      fail("stand-in tokenizer: byte 0x{:02X} has no id in a vocabulary of {} ids", byte, vocab_size);
    }
    ids.push_back(byte);
    ++i;
  }
  return ids;
}

}  // namespace tide::stand_in_vocab

// The "added_tokens" of tokenizer.json (special tokens and user-added ones): found in the text before the
// model runs, leftmost-longest, with HF's single_word / lstrip / rstrip / normalized flags, and with the ids HF
// assigns (a content already in the vocabulary keeps its vocabulary id; a new one is numbered after it).
// Non-goals: adding tokens at run time, encode_special_tokens (special tokens in text are always matched).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/normalizer.h"

namespace tide {

struct AddedToken {
  std::string content;
  // What is matched and what decoding prints: the normalized content for `normalized` tokens, as HF does.
  std::string pattern;
  int32_t id = 0;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  bool special = false;
};

// A piece of text: either plain text (added_id < 0) or the span of an added token and its id.
struct TextSegment {
  std::string_view text;
  int32_t added_id = -1;
};

class AddedVocabulary {
 public:
  // Parses `value` (the added_tokens array, nullptr when absent); `normalizer` produces the patterns of
  // normalized tokens. Throws tide::Error naming the field.
  static AddedVocabulary from_json(const json_fields::Json* value, const std::string& path, const BpeModel& model,
                                   const Normalizer& normalizer);

  // Cuts `text` at the added tokens whose `normalized` flag equals `normalized` (false: raw input, before the
  // normalizer; true: normalized text). Segments are views into `text`, in order, covering it except for
  // whitespace absorbed by lstrip / rstrip.
  std::vector<TextSegment> split(std::string_view text, bool normalized) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }
  std::optional<int32_t> token_to_id(std::string_view content) const;

 private:
  // Byte trie over the patterns of one kind of token, giving leftmost-longest matches.
  class Trie {
   public:
    void insert(std::string_view pattern, int32_t token_index);
    // First match starting at or after `from`: the longest pattern at the leftmost position that has one.
    bool find(std::string_view text, size_t from, size_t& start, size_t& end, int32_t& token_index) const;
    bool empty() const { return node_token_.size() <= 1; }

   private:
    int32_t step(int32_t node, unsigned char byte) const;
    std::unordered_map<uint64_t, int32_t> edges_;  // (node << 8 | byte) -> child node
    std::vector<int32_t> node_token_{-1};          // token index ending at each node, -1 if none; node 0 = root
    std::array<bool, 256> first_byte_{};           // lets the scan skip bytes no pattern starts with
  };

  std::vector<AddedToken> tokens_;
  StringMap<int32_t> by_content_;  // content -> id
  Trie raw_trie_;
  Trie normalized_trie_;
};

}  // namespace tide

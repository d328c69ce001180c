// The BPE "model" of tokenizer.json: vocabulary, ranked merges, and HF's merge loop (lowest rank first,
// leftmost on ties), with a per-word result cache so long prompts cost one merge loop per distinct word.
// Merges may be spelled "a b" or ["a", "b"]. Non-goals: dropout, byte_fallback, continuing_subword_prefix
// and end_of_word_suffix (rejected at load with an error naming the field); training.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/json_fields.h"

namespace tide {

// Lets unordered maps keyed by std::string be searched with a string_view without allocating.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename Value>
using StringMap = std::unordered_map<std::string, Value, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  // Parses the "model" object (type "BPE"); throws tide::Error naming the offending field.
  static BpeModel from_json(const json_fields::Json& model, const std::string& path);

  // Appends the ids of one pre-tokenized word. A character with no vocabulary entry maps to unk_token, or
  // throws tide::Error naming the word when there is none. Thread-safe.
  void tokenize(std::string_view word, std::vector<int32_t>& ids) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The token of `id`, or nullptr when no vocabulary entry has that id.
  const std::string* id_to_token(int32_t id) const;
  // Number of vocabulary entries (HF's get_vocab_size, which numbers new added tokens).
  size_t size() const { return vocab_.size(); }
  // Largest id in the vocabulary, -1 when it is empty.
  int32_t max_id() const { return static_cast<int32_t>(id_to_token_.size()) - 1; }

 private:
  struct Merge {
    uint32_t rank;
    int32_t new_id;
  };
  struct WordCache;

  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  void parse_merges(const json_fields::Json& merges, const std::string& path);
  std::vector<int32_t> initial_symbols(std::string_view word) const;
  std::vector<int32_t> merge_word(std::string_view word) const;

  StringMap<int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::optional<std::string> unk_token_;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  std::shared_ptr<WordCache> cache_;  // shared by copies; internally locked
};

}  // namespace tide

// TokenVocabulary: the bytes each token id stands for, which ids end generation (stop ids: allowed exactly
// where the grammar may end) and which are special (never allowed under a grammar), plus the sorted view the
// mask computation walks: the distinct byte strings of the ordinary tokens in lexicographic order, so that
// tokens sharing a prefix are neighbours and the prefix is matched once.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tide {
class Tokenizer;
}

namespace tide::grammar {

class TokenVocabulary {
 public:
  // token_bytes[id]: the raw bytes of token id (partial UTF-8 allowed). Stop ids are allowed only where the
  // grammar may end; special ids and ids with no bytes are never allowed. Ids out of range are refused.
  TokenVocabulary(std::vector<std::string> token_bytes, std::vector<int32_t> stop_ids,
                  std::vector<int32_t> special_ids = {});

  // From a tokenizer: each id's bytes as its decoder produces them (byte-level tokens mapped back to raw
  // bytes), its special tokens flagged, and the engine's stop ids. Throws tide::Error when the tokenizer's
  // decoding is not a plain concatenation of token bytes.
  static std::shared_ptr<const TokenVocabulary> from_tokenizer(const Tokenizer& tokenizer,
                                                               std::vector<int32_t> stop_ids);

  int32_t size() const { return static_cast<int32_t>(bytes_.size()); }
  // 32-bit words of a mask over the ids (bit id % 32 of word id / 32).
  size_t mask_words() const { return (bytes_.size() + 31) / 32; }
  const std::string& token_bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }
  bool is_stop(int32_t id) const { return kind_[static_cast<size_t>(id)] == Kind::kStop; }
  // Ids never allowed: special, empty or out of range.
  bool is_never_allowed(int32_t id) const {
    return id < 0 || id >= size() || kind_[static_cast<size_t>(id)] == Kind::kNever;
  }
  std::span<const int32_t> stop_ids() const { return stop_ids_; }

  // The sorted view: string i (0 <= i < string_count()), the ids that have exactly those bytes, and the
  // length of the common prefix with string i - 1 (0 for i = 0).
  size_t string_count() const { return lcp_.size(); }
  std::string_view string(size_t i) const { return bytes_[static_cast<size_t>(ids_[id_begin_[i]])]; }
  std::span<const int32_t> ids_of(size_t i) const { return {ids_.data() + id_begin_[i], ids_.data() + id_begin_[i + 1]}; }
  uint32_t common_prefix(size_t i) const { return lcp_[i]; }
  // For string i and a prefix length d < |string i|: the first index after i whose string does not start
  // with string(i)[0..d+1), i.e. the end of the subtree below that prefix (used to skip dead prefixes).
  size_t subtree_end(size_t i, size_t depth) const;
  size_t max_token_length() const { return max_length_; }

 private:
  enum class Kind : uint8_t { kNormal, kStop, kNever };
  void build_sorted_view();

  std::vector<std::string> bytes_;
  std::vector<Kind> kind_;
  std::vector<int32_t> stop_ids_;
  std::vector<int32_t> ids_;       // ids grouped by string, groups in sorted string order
  std::vector<uint32_t> id_begin_;
  std::vector<uint32_t> lcp_;
  std::vector<uint32_t> next_shorter_;  // first j > i with lcp_[j] < current length bound (see subtree_end)
  size_t max_length_ = 0;
};

}  // namespace tide::grammar

#include "grammar/vocabulary.h"

#include <fmt/format.h>

#include <algorithm>

#include "grammar/grammar.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/stand_in_vocab.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace tide::grammar {

TokenVocabulary::TokenVocabulary(std::vector<std::string> token_bytes, std::vector<int32_t> stop_ids,
                                 std::vector<int32_t> special_ids)
    : bytes_(std::move(token_bytes)), kind_(bytes_.size(), Kind::kNormal) {
  for (size_t id = 0; id < bytes_.size(); ++id) {
    if (bytes_[id].empty()) kind_[id] = Kind::kNever;
  }
  for (const int32_t id : special_ids) {
    if (id < 0 || id >= size()) throw GrammarError(fmt::format("vocabulary: special id {} out of range [0, {})", id, size()));
    kind_[static_cast<size_t>(id)] = Kind::kNever;
  }
  for (const int32_t id : stop_ids) {
    if (id < 0 || id >= size()) throw GrammarError(fmt::format("vocabulary: stop id {} out of range [0, {})", id, size()));
    if (kind_[static_cast<size_t>(id)] != Kind::kStop) stop_ids_.push_back(id);
    kind_[static_cast<size_t>(id)] = Kind::kStop;
  }
  build_sorted_view();
}

void TokenVocabulary::build_sorted_view() {
  std::vector<int32_t> order;
  for (size_t id = 0; id < bytes_.size(); ++id) {
    if (kind_[id] == Kind::kNormal) order.push_back(static_cast<int32_t>(id));
  }
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    const int c = bytes_[static_cast<size_t>(a)].compare(bytes_[static_cast<size_t>(b)]);
    return c != 0 ? c < 0 : a < b;
  });
  ids_ = order;
  for (size_t k = 0; k < order.size(); ++k) {
    const std::string& s = bytes_[static_cast<size_t>(order[k])];
    if (k > 0 && s == bytes_[static_cast<size_t>(order[k - 1])]) continue;  // same bytes: one string, several ids
    const std::string_view prev = lcp_.empty() ? std::string_view() : string(lcp_.size() - 1);
    size_t l = 0;
    while (l < prev.size() && l < s.size() && prev[l] == s[l]) ++l;
    id_begin_.push_back(static_cast<uint32_t>(k));
    lcp_.push_back(static_cast<uint32_t>(l));
    max_length_ = std::max(max_length_, s.size());
  }
  id_begin_.push_back(static_cast<uint32_t>(ids_.size()));
  // next_shorter_[j]: the first k > j with lcp_[k] < lcp_[j] (a monotonic stack from the right).
  const size_t n = lcp_.size();
  next_shorter_.assign(n, static_cast<uint32_t>(n));
  std::vector<uint32_t> stack;
  for (size_t j = n; j-- > 0;) {
    while (!stack.empty() && lcp_[stack.back()] >= lcp_[j]) stack.pop_back();
    next_shorter_[j] = stack.empty() ? static_cast<uint32_t>(n) : stack.back();
    stack.push_back(static_cast<uint32_t>(j));
  }
}

size_t TokenVocabulary::subtree_end(size_t i, size_t depth) const {
  // Every string from i + 1 on that shares more than `depth` bytes with its predecessor is still below the
  // prefix; jumps to the next smaller common prefix skip whole runs, each jump lowering the bound.
  size_t j = i + 1;
  while (j < lcp_.size() && lcp_[j] > depth) j = next_shorter_[j];
  return j;
}

std::shared_ptr<const TokenVocabulary> TokenVocabulary::from_tokenizer(const Tokenizer& tokenizer,
                                                                       std::vector<int32_t> stop_ids) {
  const int32_t n = tokenizer.vocab_size();
  std::vector<std::string> byte_level(static_cast<size_t>(n));
  std::vector<std::string> decoded(static_cast<size_t>(n));
  std::vector<int32_t> special;
  for (int32_t id = 0; id < n; ++id) {
    const auto i = static_cast<size_t>(id);
    if (tokenizer.is_stand_in()) {
      byte_level[i] = stand_in_vocab::token_text(id);
      continue;
    }
    const std::string* token = nullptr;
    try {
      token = &tokenizer.id_to_token(id);
    } catch (const Error&) {
      continue;  // an id no token uses: empty, never allowed
    }
    byte_level::decode_token(*token, byte_level[i]);
    const int32_t one[] = {id};
    decoded[i] = tokenizer.decode(one);
    if (tokenizer.is_special(id)) special.push_back(id);
  }
  // The tokenizer decodes with a ByteLevel decoder (token bytes mapped back from GPT-2 characters, then
  // concatenated) or none (token strings joined with spaces, which a byte-level grammar cannot follow); the
  // bytes are checked against decode() of every single id.
  std::string lossy;
  for (int32_t id = 0; id < n && !tokenizer.is_stand_in(); ++id) {
    lossy.clear();
    utf8::append_lossy(byte_level[static_cast<size_t>(id)], true, lossy);
    if (lossy != decoded[static_cast<size_t>(id)]) {
      fail("structured output needs a tokenizer whose decoding concatenates token bytes (ByteLevel decoder); "
           "token {} decodes differently", id);
    }
  }
  stop_ids.erase(std::remove_if(stop_ids.begin(), stop_ids.end(), [&](int32_t id) { return id < 0 || id >= n; }),
                 stop_ids.end());
  return std::make_shared<const TokenVocabulary>(std::move(byte_level), std::move(stop_ids), std::move(special));
}

}  // namespace tide::grammar

#include "tokenizer/added_tokens.h"

#include <algorithm>
#include <unordered_map>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace tide {
namespace jf = json_fields;

AddedVocabulary AddedVocabulary::from_json(const jf::Json* value, const std::string& path, const BpeModel& model,
                                           const Normalizer& normalizer) {
  AddedVocabulary vocabulary;
  if (value == nullptr) return vocabulary;
  jf::as_array(*value, path);
  // HF ignores the "id" written in the file: it re-adds the tokens, reusing vocabulary ids and numbering the
  // others from the vocabulary size on. Well-formed files agree; where they do not, HF's ids are the truth.
  // Ids written twice for different contents, or written for a content other than the vocabulary's token of
  // that id, are refused: HF warns and renumbers them, so the model would see other ids than the file says.
  int64_t next_id = static_cast<int64_t>(model.size());
  std::unordered_map<int32_t, std::string> content_of_id;  // the file's ids
  for (size_t i = 0; i < value->size(); ++i) {
    const std::string entry_path = jf::element(path, i);
    const jf::Json& entry = jf::as_object((*value)[i], entry_path);
    AddedToken token;
    token.content = jf::as_string(jf::require(entry, "content", entry_path), jf::child(entry_path, "content"));
    const int32_t file_id = jf::as_token_id(jf::require(entry, "id", entry_path), jf::child(entry_path, "id"));
    const auto [seen, fresh] = content_of_id.emplace(file_id, token.content);
    if (!fresh && seen->second != token.content) {
      fail("{}: added tokens '{}' and '{}' both have id {}: every id must name one token", jf::child(entry_path, "id"),
           seen->second, token.content, file_id);
    }
    const std::string* vocab_token = model.id_to_token(file_id);
    if (vocab_token != nullptr && *vocab_token != token.content) {
      fail("{}: added token '{}' has id {}, which model.vocab gives to '{}': every id must name one token",
           jf::child(entry_path, "id"), token.content, file_id, *vocab_token);
    }
    token.single_word = jf::bool_or(entry, "single_word", false, entry_path);
    token.lstrip = jf::bool_or(entry, "lstrip", false, entry_path);
    token.rstrip = jf::bool_or(entry, "rstrip", false, entry_path);
    token.normalized = jf::bool_or(entry, "normalized", true, entry_path);
    token.special = jf::bool_or(entry, "special", false, entry_path);
    if (token.content.empty()) continue;  // HF skips empty tokens
    token.pattern = token.normalized ? normalizer.apply(token.content) : token.content;

    const auto known = vocabulary.by_content_.find(token.content);
    if (known != vocabulary.by_content_.end()) {
      // Re-adding a content keeps its id; differing flags replace the earlier ones.
      token.id = known->second;
      auto same_id = [&](const AddedToken& t) { return t.id == token.id; };
      *std::find_if(vocabulary.tokens_.begin(), vocabulary.tokens_.end(), same_id) = token;
      continue;
    }
    if (const auto vocab_id = model.token_to_id(token.content)) {
      token.id = *vocab_id;
    } else {
      if (next_id > jf::kMaxTokenId) fail("{}: too many added tokens (id {} out of range)", entry_path, next_id);
      token.id = static_cast<int32_t>(next_id++);
    }
    vocabulary.by_content_.emplace(token.content, token.id);
    vocabulary.tokens_.push_back(std::move(token));
  }
  for (size_t i = 0; i < vocabulary.tokens_.size(); ++i) {
    const AddedToken& token = vocabulary.tokens_[i];
    (token.normalized ? vocabulary.normalized_trie_ : vocabulary.raw_trie_)
        .insert(token.pattern, static_cast<int32_t>(i));
  }
  return vocabulary;
}

std::optional<int32_t> AddedVocabulary::token_to_id(std::string_view content) const {
  const auto it = by_content_.find(content);
  if (it == by_content_.end()) return std::nullopt;
  return it->second;
}

// HF AddedVocabulary::find_matches, including its quirks: a match discarded by single_word still consumes its
// span, and lstrip never reaches back into the previous token.
std::vector<TextSegment> AddedVocabulary::split(std::string_view text, bool normalized) const {
  const Trie& trie = normalized ? normalized_trie_ : raw_trie_;
  if (trie.empty() || text.empty()) return {TextSegment{text}};
  std::vector<TextSegment> segments;
  size_t done = 0;  // end of the last emitted token
  size_t start = 0;
  size_t stop = 0;
  int32_t index = -1;
  size_t from = 0;
  while (trie.find(text, from, start, stop, index)) {
    from = stop;  // the search resumes after the match itself, even a discarded one, as HF's iterator does
    const AddedToken& token = tokens_[static_cast<size_t>(index)];
    if (token.single_word) {
      size_t after = stop;
      const bool word_before = start > 0 && utf8::is_word_char(utf8::code_point_before(text, start));
      const bool word_after = stop < text.size() && utf8::is_word_char(utf8::next_code_point(text, after));
      if (word_before || word_after) continue;
    }
    if (token.lstrip) {
      while (start > done && utf8::is_white_space(utf8::code_point_before(text, start))) {
        do --start; while ((static_cast<unsigned char>(text[start]) & 0xC0) == 0x80);
      }
    }
    if (token.rstrip) {
      size_t next = stop;
      while (stop < text.size() && utf8::is_white_space(utf8::next_code_point(text, next))) stop = next;
    }
    // A match inside whitespace that an rstrip token absorbed starts before `done`; HF still emits it (and
    // moves `done` back to its end), so the same is done here.
    if (start > done) segments.push_back({text.substr(done, start - done)});
    segments.push_back({text.substr(start, stop - start), token.id});
    done = stop;
  }
  if (done < text.size()) segments.push_back({text.substr(done)});
  return segments;
}

void AddedVocabulary::Trie::insert(std::string_view pattern, int32_t token_index) {
  if (pattern.empty()) return;
  int32_t node = 0;
  for (const char c : pattern) {
    const auto byte = static_cast<unsigned char>(c);
    int32_t next = step(node, byte);
    if (next < 0) {
      next = static_cast<int32_t>(node_token_.size());
      node_token_.push_back(-1);
      edges_.emplace((static_cast<uint64_t>(node) << 8) | byte, next);
    }
    node = next;
  }
  node_token_[static_cast<size_t>(node)] = token_index;
  first_byte_[static_cast<unsigned char>(pattern.front())] = true;
}

int32_t AddedVocabulary::Trie::step(int32_t node, unsigned char byte) const {
  const auto it = edges_.find((static_cast<uint64_t>(node) << 8) | byte);
  return it == edges_.end() ? -1 : it->second;
}

bool AddedVocabulary::Trie::find(std::string_view text, size_t from, size_t& start, size_t& end,
                                 int32_t& token_index) const {
  for (size_t s = from; s < text.size(); ++s) {
    if (!first_byte_[static_cast<unsigned char>(text[s])]) continue;
    int32_t best = -1;
    int32_t node = 0;
    for (size_t j = s; j < text.size(); ++j) {
      node = step(node, static_cast<unsigned char>(text[j]));
      if (node < 0) break;
      if (node_token_[static_cast<size_t>(node)] >= 0) {
        best = node_token_[static_cast<size_t>(node)];
        end = j + 1;
      }
    }
    if (best >= 0) {
      start = s;
      token_index = best;
      return true;
    }
  }
  return false;
}

}  // namespace tide

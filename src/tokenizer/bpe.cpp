#include "tokenizer/bpe.h"

#include <mutex>
#include <queue>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace tide {
namespace jf = json_fields;

namespace {

// Words longer than this are rare and would bloat the cache (HF uses the same kind of bound).
constexpr size_t kMaxCachedWordBytes = 256;
// Bounded so that a server tokenizing endless distinct text keeps constant memory; cleared when full.
constexpr size_t kCacheCapacity = 1 << 16;

// An optional string field that must hold its "off" value (null or `off`), since tide does not implement it.
void require_default(const jf::Json& model, std::string_view key, const jf::Json& off, const std::string& path) {
  const jf::Json* value = jf::find(model, key, path);
  if (value != nullptr && *value != off) {
    fail("{} = {} is not supported (tide's BPE supports only {} or null)", jf::child(path, key), value->dump(),
         off.dump());
  }
}

}  // namespace

struct BpeModel::WordCache {
  std::mutex mutex;
  StringMap<std::vector<int32_t>> words;
};

BpeModel BpeModel::from_json(const jf::Json& model, const std::string& path) {
  const std::string& type = jf::type_of(model, path);
  if (type != "BPE") fail("{}: unsupported model type '{}' (tide supports BPE)", jf::child(path, "type"), type);
  require_default(model, "dropout", 0.0, path);
  require_default(model, "continuing_subword_prefix", "", path);
  require_default(model, "end_of_word_suffix", "", path);
  require_default(model, "byte_fallback", false, path);

  BpeModel bpe;
  bpe.fuse_unk_ = jf::bool_or(model, "fuse_unk", false, path);
  bpe.ignore_merges_ = jf::bool_or(model, "ignore_merges", false, path);
  if (const jf::Json* unk = jf::find(model, "unk_token", path)) {
    bpe.unk_token_ = jf::as_string(*unk, jf::child(path, "unk_token"));
  }

  const std::string vocab_path = jf::child(path, "vocab");
  const jf::Json& vocab = jf::as_object(jf::require(model, "vocab", path), vocab_path);
  bpe.vocab_.reserve(vocab.size());
  for (const auto& [token, id_json] : vocab.items()) {
    const int32_t id = jf::as_token_id(id_json, jf::child(vocab_path, token));
    bpe.vocab_.emplace(token, id);
    const auto index = static_cast<size_t>(id);
    if (index >= bpe.id_to_token_.size()) {
      bpe.id_to_token_.resize(index + 1);
      bpe.has_id_.resize(index + 1, false);
    }
    // Two tokens sharing an id would decode that id to one of them only (HF keeps an arbitrary one): the file
    // is malformed, and refused rather than decoded wrongly.
    if (bpe.has_id_[index]) {
      fail("{}: tokens '{}' and '{}' both have id {}: every vocabulary id must name one token", vocab_path,
           bpe.id_to_token_[index], token, id);
    }
    bpe.id_to_token_[index] = token;
    bpe.has_id_[index] = true;
  }
  bpe.parse_merges(jf::require(model, "merges", path), jf::child(path, "merges"));
  bpe.cache_ = std::make_shared<WordCache>();
  return bpe;
}

void BpeModel::parse_merges(const jf::Json& merges, const std::string& path) {
  jf::as_array(merges, path);
  merges_.reserve(merges.size());
  uint32_t rank = 0;
  std::string merged;
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string entry_path = jf::element(path, i);
    const jf::Json& entry = merges[i];
    std::string_view left;
    std::string_view right;
    if (entry.is_string()) {
      const std::string& line = entry.get_ref<const std::string&>();
      if (line.starts_with("#version")) continue;  // header line of merges.txt, skipped by HF too
      const size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
        fail("{} = \"{}\" must be two tokens separated by one space", entry_path, line);
      }
      left = std::string_view(line).substr(0, space);
      right = std::string_view(line).substr(space + 1);
    } else if (entry.is_array() && entry.size() == 2) {
      left = jf::as_string(entry[0], jf::element(entry_path, 0));
      right = jf::as_string(entry[1], jf::element(entry_path, 1));
    } else {
      fail("{} must be a \"left right\" string or a [left, right] pair, not {}", entry_path, entry.dump());
    }
    merged.assign(left).append(right);
    const auto left_id = token_to_id(left);
    const auto right_id = token_to_id(right);
    const auto merged_id = token_to_id(merged);
    for (const auto& [token, id] : {std::pair{left, left_id}, {right, right_id}, {merged, merged_id}}) {
      if (!id) fail("{}: token '{}' is not in model.vocab", entry_path, token);
    }
    // A repeated pair keeps its last rank, like HF's map built by collect().
    merges_[pair_key(*left_id, *right_id)] = Merge{rank++, *merged_id};
  }
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  const auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || !has_id_[static_cast<size_t>(id)]) return nullptr;
  return &id_to_token_[static_cast<size_t>(id)];
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& ids) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (const auto id = token_to_id(word)) {
      ids.push_back(*id);
      return;
    }
  }
  const bool cacheable = word.size() <= kMaxCachedWordBytes;
  if (cacheable) {
    std::lock_guard lock(cache_->mutex);
    const auto it = cache_->words.find(word);
    if (it != cache_->words.end()) {
      ids.insert(ids.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> result = merge_word(word);
  ids.insert(ids.end(), result.begin(), result.end());
  if (cacheable) {
    std::lock_guard lock(cache_->mutex);
    if (cache_->words.size() >= kCacheCapacity) cache_->words.clear();
    cache_->words.emplace(word, std::move(result));
  }
}

std::vector<int32_t> BpeModel::initial_symbols(std::string_view word) const {
  std::vector<int32_t> symbols;
  symbols.reserve(word.size());
  int32_t pending_unk = -1;  // an unk id not yet pushed, so that fuse_unk can merge a run of them
  size_t pos = 0;
  while (pos < word.size()) {
    const size_t start = pos;
    utf8::next_code_point(word, pos);
    if (const auto id = token_to_id(word.substr(start, pos - start))) {
      if (pending_unk >= 0) symbols.push_back(pending_unk);
      pending_unk = -1;
      symbols.push_back(*id);
      continue;
    }
    if (!unk_token_) {
      fail("tokenizer: character '{}' of word '{}' has no entry in model.vocab and model.unk_token is null",
           word.substr(start, pos - start), word);
    }
    const auto unk_id = token_to_id(*unk_token_);
    if (!unk_id) fail("tokenizer: model.unk_token '{}' is not in model.vocab", *unk_token_);
    if (pending_unk >= 0 && fuse_unk_) continue;
    if (pending_unk >= 0) symbols.push_back(pending_unk);
    pending_unk = *unk_id;
  }
  if (pending_unk >= 0) symbols.push_back(pending_unk);
  return symbols;
}

// HF's Word::merge_all: a heap of candidate merges keyed by (rank, position); entries made stale by earlier
// merges are recognised and skipped when popped. O(n log n) in the word length.
std::vector<int32_t> BpeModel::merge_word(std::string_view word) const {
  const std::vector<int32_t> ids = initial_symbols(word);
  if (ids.size() < 2) return ids;
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    bool alive;
  };
  struct Candidate {
    uint32_t rank;
    int32_t pos;
    int32_t new_id;
  };
  const auto later = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(later)> queue(later);
  std::vector<Symbol> symbols(ids.size());
  const auto n = static_cast<int32_t>(ids.size());
  for (int32_t i = 0; i < n; ++i) {
    symbols[static_cast<size_t>(i)] = {ids[static_cast<size_t>(i)], i - 1, i + 1 < n ? i + 1 : -1, true};
  }

  const auto push_candidate = [&](int32_t pos) {
    const Symbol& left = symbols[static_cast<size_t>(pos)];
    if (left.next < 0) return;
    const auto it = merges_.find(pair_key(left.id, symbols[static_cast<size_t>(left.next)].id));
    if (it != merges_.end()) queue.push({it->second.rank, pos, it->second.new_id});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_candidate(i);

  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[static_cast<size_t>(top.pos)];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[static_cast<size_t>(left.next)];
    const auto it = merges_.find(pair_key(left.id, right.id));
    if (it == merges_.end() || it->second.new_id != top.new_id) continue;  // stale entry
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (left.next >= 0) symbols[static_cast<size_t>(left.next)].prev = top.pos;
    if (left.prev >= 0) push_candidate(left.prev);
    push_candidate(top.pos);
  }
  std::vector<int32_t> result;
  for (const Symbol& symbol : symbols) {
    if (symbol.alive) result.push_back(symbol.id);
  }
  return result;
}

}  // namespace tide

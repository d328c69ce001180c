#include "grammar/matcher.h"

#include <algorithm>

namespace tide::grammar {

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar, size_t max_rollback_tokens)
    : grammar_(std::move(grammar)), max_rollback_(max_rollback_tokens) {
  if (!grammar_) throw GrammarError("GrammarMatcher: no grammar");
  reset();
}

void GrammarMatcher::reset() {
  detail::initial_state(grammar_->byte_grammar(), state_);
  stopped_ = false;
  key_valid_ = false;
  history_.clear();
}

void GrammarMatcher::save() {
  if (max_rollback_ == 0) return;
  if (history_.size() == max_rollback_) history_.pop_front();
  history_.push_back({state_, stopped_});
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
  if (stopped_) return false;
  if (bytes.empty()) return true;
  const detail::ByteGrammar& g = grammar_->byte_grammar();
  const detail::StackSet* cur = &state_;
  int next = 0;
  for (const char c : bytes) {
    detail::step(g, *cur, static_cast<uint8_t>(c), scratch_[next]);
    if (scratch_[next].dead()) return false;
    cur = &scratch_[next];
    next ^= 1;
  }
  std::swap(state_, scratch_[next ^ 1]);
  key_valid_ = false;
  return true;
}

bool GrammarMatcher::accept_token(int32_t id) {
  const TokenVocabulary& v = vocabulary();
  if (id < 0 || id >= v.size()) return false;
  if (v.is_stop(id)) {
    if (!can_end()) return false;
    save();
    stopped_ = true;
    return true;
  }
  if (v.is_never_allowed(id) || stopped_) return false;
  Saved before{state_, stopped_};
  if (!accept_bytes(v.token_bytes(id))) return false;
  if (max_rollback_ > 0) {
    if (history_.size() == max_rollback_) history_.pop_front();
    history_.push_back(std::move(before));
  }
  return true;
}

bool GrammarMatcher::rollback(size_t n) {
  if (n > history_.size()) return false;
  if (n == 0) return true;
  history_.resize(history_.size() - (n - 1));
  state_ = std::move(history_.back().state);
  stopped_ = history_.back().stopped;
  history_.pop_back();
  key_valid_ = false;
  return true;
}

void GrammarMatcher::fill_mask(std::span<uint32_t> bits) {
  const TokenVocabulary& v = vocabulary();
  if (stopped_) {
    std::fill(bits.begin(), bits.end(), 0u);
    for (const int32_t id : v.stop_ids()) bits[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);
    return;
  }
  if (!key_valid_) {
    key_ = state_.key();
    key_valid_ = true;
  }
  grammar_->fill_mask(state_, key_, bits);
}

}  // namespace tide::grammar

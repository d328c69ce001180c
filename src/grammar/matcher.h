// GrammarMatcher: one request's position in a compiled grammar. It accepts tokens (or raw bytes) as they are
// generated and gives the mask of the tokens that may come next: a token is allowed when its bytes continue
// the text so far to a prefix of some sentence of the grammar; stop ids are allowed exactly where the text
// so far is a sentence; special tokens never. Not thread-safe (one matcher per request); the CompiledGrammar
// behind it is shared.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "grammar/compiled_grammar.h"
#include "grammar/stack_set.h"

namespace tide::grammar {

class GrammarMatcher {
 public:
  // max_rollback_tokens: how many accepted tokens rollback() can undo (their states are kept).
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar, size_t max_rollback_tokens = 16);

  // Consumes a token; false (state unchanged) when it is not allowed. A stop id is accepted where the text
  // may end and stops the matcher: nothing but another stop id is accepted afterwards.
  // Throws GrammarError when the grammar explodes (too many parse stacks).
  bool accept_token(int32_t id);
  // Consumes raw bytes (possibly part of a character); false (state unchanged) when they do not continue
  // the text to a prefix of a sentence.
  bool accept_bytes(std::string_view bytes);

  // The text so far is a sentence of the grammar (a stop id is allowed).
  bool can_end() const { return stopped_ || state_.has_end(); }
  // The text can end and nothing may follow it: only stop ids are allowed (or a stop id was accepted).
  bool is_terminated() const { return stopped_ || (state_.has_end() && state_.count() == 0); }
  // A stop id was accepted.
  bool is_stopped() const { return stopped_; }

  // Writes the allowed-token mask: bit id % 32 of word id / 32 set iff token id is allowed. `bits` needs at
  // least vocabulary().mask_words() words; words beyond are zeroed. After a stop, only the stop ids are set.
  void fill_mask(std::span<uint32_t> bits);

  // Undoes the last n accepted tokens (n <= the tokens kept, see the constructor); false if it cannot.
  bool rollback(size_t n);
  // Back to the start of the grammar.
  void reset();

  const CompiledGrammar& grammar() const { return *grammar_; }
  const TokenVocabulary& vocabulary() const { return grammar_->vocabulary(); }
  // Parse stacks currently possible (diagnostics, tests).
  uint32_t stack_count() const { return state_.count(); }

 private:
  struct Saved {
    detail::StackSet state;
    bool stopped;
  };
  void save();

  std::shared_ptr<const CompiledGrammar> grammar_;
  detail::StackSet state_;
  bool stopped_ = false;
  std::string key_;  // state_.key(), computed when a mask is needed
  bool key_valid_ = false;
  detail::StackSet scratch_[2];
  size_t max_rollback_;
  std::deque<Saved> history_;
};

}  // namespace tide::grammar

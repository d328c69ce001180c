// Output constraints (structured outputs): what may come next in a sample's output, as a state machine over
// token ids. The runtime knows only this interface; the server builds constraints from JSON schemas, regular
// expressions and grammars (src/grammar). Each sample of a request gets its own state from the request's spec.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

namespace tide {

// One sample's constraint state. Used by the engine's loop thread only.
class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets bit (id % 32) of words[id / 32] for every token that may come next, clears the others: the stop ids
  // exactly when the output may end here. `words` holds ceil(vocab / 32) words.
  virtual void fill_mask(std::span<uint32_t> words) = 0;
  // Advances past `token`; false (the state unchanged) when the token was not allowed.
  virtual bool accept(int32_t token) = 0;
  // A copy of this state that advances on its own: speculative decoding checks drafted tokens on it and
  // writes the masks of the rows after them. Null: the state cannot be copied, and its sample does not
  // speculate.
  virtual std::unique_ptr<TokenConstraint> clone() const { return nullptr; }
};

// What a request is constrained by; makes the state of each of its samples. Shared across threads: start() must
// be thread-safe.
class TokenConstraintSpec {
 public:
  virtual ~TokenConstraintSpec() = default;
  virtual std::unique_ptr<TokenConstraint> start() const = 0;
};

}  // namespace tide

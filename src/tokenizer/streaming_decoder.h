// StreamingDecoder: incremental detokenization for streamed generation. Ids are pushed one at a time and each
// push returns the text they completed; bytes of a UTF-8 character split across tokens are held back until the
// character is complete, so a push never returns half a character. The concatenation of every push() and
// finish() equals Tokenizer::decode() of all the ids. Non-goal: thread safety (one decoder per stream).
#pragma once

#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

namespace tide {

class StreamingDecoder {
 public:
  // Keeps a (cheap, shared) copy of `tokenizer`, so it may outlive the caller's object.
  explicit StreamingDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = false);

  // Adds one id; returns the newly completed text (possibly empty), always valid UTF-8. Throws tide::Error on
  // an unknown id, leaving the decoder as it was.
  std::string push(int32_t id);

  // Ends the stream: returns the held-back bytes (an unfinished character becomes U+FFFD, as decode() does)
  // and resets the decoder for a new stream.
  std::string finish();

 private:
  Tokenizer tokenizer_;
  bool skip_special_tokens_;
  bool first_ = true;
  std::string pending_;  // bytes of an incomplete trailing UTF-8 sequence
};

}  // namespace tide

// TextStream: the text of one generated sequence as it grows, for streaming: ids are detokenized incrementally
// (StreamingDecoder: never half a UTF-8 character) and searched for stop strings. A stop string is found even
// when it spans several tokens; the text that could still be the start of one is held back until it is known
// not to be, so no emitted text is ever taken back. On a match the text ends before the stop string (or after
// it, with include_stop), and the match ends generation. Non-goal: thread safety (one stream per sequence).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/streaming_decoder.h"

namespace tide {

class TextStream {
 public:
  // `stops`: non-empty strings. skip_special_tokens: special tokens (BOS, EOS, chat markers) add no text.
  TextStream(const Tokenizer& tokenizer, std::vector<std::string> stops, bool include_stop, bool skip_special_tokens);

  struct Piece {
    std::string text;      // new text that may be shown (possibly empty)
    bool stopped = false;  // a stop string completed: the text is final, generation must end
  };

  // Adds one generated id. `may_stop`: stop strings are looked for (false before min_tokens are reached; a
  // match may still begin in the held-back text of those tokens). Throws tide::Error on an unknown id. After a
  // stop, further pushes return nothing.
  Piece push(int32_t id, bool may_stop = true);
  // The end of generation for another reason (length, stop id, abort): everything held back.
  std::string finish();
  bool stopped() const { return stopped_; }
  // All text emitted so far (push and finish pieces together).
  const std::string& text() const { return emitted_; }

 private:
  StreamingDecoder decoder_;
  std::vector<std::string> stops_;
  bool include_stop_;
  size_t max_stop_ = 0;    // bytes of the longest stop string
  std::string pending_;    // decoded, not emitted yet: may begin a stop string
  size_t checked_ = 0;     // pending_'s first checked_ bytes hold no stop string (searched with may_stop)
  std::string emitted_;
  bool stopped_ = false;
  bool finished_ = false;
};

}  // namespace tide

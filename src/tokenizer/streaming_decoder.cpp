#include "tokenizer/streaming_decoder.h"

#include "tokenizer/utf8.h"

namespace tide {

StreamingDecoder::StreamingDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

std::string StreamingDecoder::push(int32_t id) {
  // decode() repairs UTF-8 over the whole byte stream; running the same repair over the bytes so far and
  // holding back only an incomplete tail gives identical output, since every earlier decision is final.
  tokenizer_.append_token_bytes(id, skip_special_tokens_, first_, pending_);
  std::string text;
  const size_t consumed = utf8::append_lossy(pending_, /*final=*/false, text);
  pending_.erase(0, consumed);
  return text;
}

std::string StreamingDecoder::finish() {
  std::string text;
  utf8::append_lossy(pending_, /*final=*/true, text);
  pending_.clear();
  first_ = true;
  return text;
}

}  // namespace tide

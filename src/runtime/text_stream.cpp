#include "runtime/text_stream.h"

#include <algorithm>

#include "core/error.h"

namespace tide {
namespace {

// The largest n <= limit such that text[0, n) does not end inside a UTF-8 character.
size_t utf8_boundary(const std::string& text, size_t limit) {
  size_t n = std::min(limit, text.size());
  while (n > 0 && n < text.size() && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) --n;
  return n;
}

}  // namespace

TextStream::TextStream(const Tokenizer& tokenizer, std::vector<std::string> stops, bool include_stop,
                       bool skip_special_tokens)
    : decoder_(tokenizer, skip_special_tokens), stops_(std::move(stops)), include_stop_(include_stop) {
  for (const std::string& s : stops_) {
    if (s.empty()) fail("stop strings must not be empty");
    max_stop_ = std::max(max_stop_, s.size());
  }
}

TextStream::Piece TextStream::push(int32_t id, bool may_stop) {
  Piece out;
  if (stopped_ || finished_) return out;
  pending_ += decoder_.push(id);
  if (may_stop && !stops_.empty()) {
    // The earliest match wins (then the longest at that position). Only pending_ can hold one: emitted text
    // always kept the last max_stop_ - 1 bytes back, so a match starting in it would have completed before.
    // pending_[0, checked_) holds no match, so each stop is looked for only where it would end in later bytes:
    // the work per token stays proportional to the stop strings' total size plus the new text, not to the
    // number of stops times the held-back text (one long stop string holds back that much).
    size_t best = std::string::npos, best_len = 0;
    for (const std::string& s : stops_) {
      const size_t at = pending_.find(s, checked_ >= s.size() ? checked_ - s.size() + 1 : 0);
      if (at != std::string::npos && (at < best || (at == best && s.size() > best_len))) {
        best = at;
        best_len = s.size();
      }
    }
    if (best != std::string::npos) {
      out.text = pending_.substr(0, include_stop_ ? best + best_len : best);
      out.stopped = stopped_ = true;
      pending_.clear();
      emitted_ += out.text;
      return out;
    }
    checked_ = pending_.size();
  }
  // Keep back what may still begin a stop string: the last max_stop_ - 1 bytes.
  const size_t keep = stops_.empty() ? 0 : max_stop_ - 1;
  const size_t n = utf8_boundary(pending_, pending_.size() > keep ? pending_.size() - keep : 0);
  out.text = pending_.substr(0, n);
  pending_.erase(0, n);
  checked_ = checked_ > n ? checked_ - n : 0;
  emitted_ += out.text;
  return out;
}

std::string TextStream::finish() {
  if (stopped_ || finished_) return {};
  finished_ = true;
  std::string out = pending_ + decoder_.finish();
  pending_.clear();
  emitted_ += out;
  return out;
}

}  // namespace tide

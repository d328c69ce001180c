// Cohere's citation tags: the tag grammar, the per-channel parser that takes them out of the streamed text, and
// citation_sources, which resolves a tag's (tool_call_id, result indices) against the conversation.
#include <algorithm>
#include <charconv>
#include <set>
#include <unordered_map>

#include "chat/cohere_output_detail.h"

namespace tide {

namespace cohere {

namespace {

// A tag longer than this is text: real tags name a handful of sources.
constexpr std::size_t kMaxTagLength = 1024;
// A result index has at most this many digits (so that it fits int64_t).
constexpr int kMaxIndexDigits = 15;

bool is_id_char(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '-' ||
         c == '.';
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

}  // namespace

CitationTag match_citation_tag(std::string_view text, bool closing) {
  const std::string_view head = closing ? "</co" : "<co";
  CitationTag tag;
  const std::size_t n = std::min(text.size(), head.size());
  if (text.substr(0, n) != head.substr(0, n)) return tag;
  if (text.size() < head.size()) {
    tag.match = Match::kPartial;
    return tag;
  }
  // After "<co": '>' (no sources) or ':' and the sources, "ID:[i, j], ID:[k]", then '>'.
  enum class State { kAfterHead, kIdStart, kId, kAfterId, kListOpen, kListStart, kIndex, kAfterIndex, kNextIndex,
                     kAfterList };
  State state = State::kAfterHead;
  std::string id;
  int64_t index = 0;
  int digits = 0;
  for (std::size_t i = head.size(); i < text.size() && i < kMaxTagLength; ++i) {
    const char c = text[i];
    const bool blank = c == ' ' || c == '\t';
    const auto done = [&] {
      tag.match = Match::kDone;
      tag.length = i + 1;
      return tag;
    };
    const auto start_index = [&] {
      index = c - '0';
      digits = 1;
      state = State::kIndex;
    };
    switch (state) {
      case State::kAfterHead:
        if (c == '>') return done();
        if (c != ':') return {};
        tag.has_sources = true;
        state = State::kIdStart;
        break;
      case State::kIdStart:
        if (blank) break;
        if (!is_id_char(c)) return {};
        id.assign(1, c);
        state = State::kId;
        break;
      case State::kId:
      case State::kAfterId:
        if (state == State::kId && is_id_char(c)) {
          id.push_back(c);
        } else if (blank) {
          state = State::kAfterId;
        } else if (c == ':') {
          state = State::kListOpen;
        } else {
          return {};
        }
        break;
      case State::kListOpen:
        if (blank) break;
        if (c != '[') return {};
        tag.sources.emplace_back(id, std::vector<int64_t>{});
        state = State::kListStart;
        break;
      case State::kListStart:
        if (blank) break;
        if (is_digit(c)) {
          start_index();
        } else if (c == ']') {
          state = State::kAfterList;
        } else {
          return {};
        }
        break;
      case State::kIndex:
        if (is_digit(c)) {
          if (++digits > kMaxIndexDigits) return {};
          index = index * 10 + (c - '0');
          break;
        }
        if (!blank && c != ',' && c != ']') return {};
        tag.sources.back().second.push_back(index);
        state = blank ? State::kAfterIndex : c == ',' ? State::kNextIndex : State::kAfterList;
        break;
      case State::kAfterIndex:
        if (blank) break;
        if (c != ',' && c != ']') return {};
        state = c == ',' ? State::kNextIndex : State::kAfterList;
        break;
      case State::kNextIndex:
        if (blank) break;
        if (!is_digit(c)) return {};
        start_index();
        break;
      case State::kAfterList:
        if (blank) break;
        if (c == '>') return done();
        if (c != ',') return {};
        state = State::kIdStart;
        break;
    }
  }
  if (text.size() >= kMaxTagLength) return {};
  tag.match = Match::kPartial;
  return tag;
}

CitationChannel::CitationChannel(bool citations, bool in_reasoning, std::size_t max_held)
    : citations_(citations), in_reasoning_(in_reasoning), max_held_(max_held) {}

void CitationChannel::add(std::string_view text, CohereDelta& out) {
  if (!citations_) {
    emit(text, out);
    return;
  }
  pending_.append(text);
  process(/*final=*/false, out);
}

void CitationChannel::add_raw(std::string_view text, CohereDelta& out) {
  flush(out);
  emit(text, out);
}

void CitationChannel::flush(CohereDelta& out) {
  if (!pending_.empty()) process(/*final=*/true, out);
}

void CitationChannel::emit(std::string_view text, CohereDelta& out) {
  if (text.empty()) return;
  (in_reasoning_ ? out.reasoning : out.content).append(text);
  emitted_code_points_ += count_code_points(text);
}

// Settles what it can of pending_. Every decision depends only on the text from the point it is taken, never on
// where the pieces were split: a prefix that more text may still turn into a tag waits (unless `final`), and the
// byte limit on a span is measured from the span's start.
void CitationChannel::process(bool final, CohereDelta& out) {
  const std::string_view text = pending_;
  std::size_t done = 0;  // text[0, done) is settled
  while (done < text.size()) {
    if (!in_span_) {
      const std::size_t lt = text.find('<', done);
      if (lt == std::string_view::npos) {
        emit(text.substr(done), out);
        done = text.size();
        break;
      }
      emit(text.substr(done, lt - done), out);
      done = lt;
      CitationTag open = match_citation_tag(text.substr(lt), /*closing=*/false);
      if (open.match == Match::kPartial && !final) break;
      if (open.match == Match::kDone) {
        in_span_ = true;
        open_length_ = open.length;
        open_has_sources_ = open.has_sources;
        open_sources_ = std::move(open.sources);
        scan_ = lt + open.length;
        continue;
      }
      emit("<", out);
      done = lt + 1;
      continue;
    }
    // In a span: text[done, span) is its opening tag; look for the closing tag (or a new opening one).
    const std::size_t span = done + open_length_;
    const std::size_t limit = span + max_held_;
    bool waiting = false;
    bool restarted = false;
    while (scan_ < text.size() && scan_ < limit) {
      const std::size_t lt = text.find('<', scan_);
      if (lt == std::string_view::npos || lt >= limit) {
        scan_ = std::min(text.size(), limit);
        break;
      }
      CitationTag close = match_citation_tag(text.substr(lt), /*closing=*/true);
      if (close.match == Match::kDone && (close.has_sources || open_has_sources_)) {
        ParsedCitation citation;
        citation.text = std::string(text.substr(span, lt - span));
        citation.sources = close.has_sources ? std::move(close.sources) : open_sources_;
        citation.in_reasoning = in_reasoning_;
        citation.start = emitted_code_points_;
        emit(citation.text, out);
        citation.end = emitted_code_points_;
        out.citations.push_back(std::move(citation));
        done = lt + close.length;
        in_span_ = false;
        restarted = true;
        break;
      }
      if (close.match == Match::kPartial && !final) {
        waiting = true;
        break;
      }
      // A second opening tag: the first one was not a span's; it and its text so far are plain text.
      CitationTag open = match_citation_tag(text.substr(lt), /*closing=*/false);
      if (open.match == Match::kDone) {
        emit(text.substr(done, lt - done), out);
        done = lt;
        open_length_ = open.length;
        open_has_sources_ = open.has_sources;
        open_sources_ = std::move(open.sources);
        scan_ = lt + open.length;
        restarted = true;
        break;
      }
      if (open.match == Match::kPartial && !final) {
        waiting = true;
        break;
      }
      scan_ = lt + 1;
    }
    if (restarted) continue;
    if (waiting) break;
    if (scan_ >= limit) {  // too long to be a span: the opening tag and the text so far are plain text
      const std::size_t cut = char_start_at_or_before(text, limit, span);
      emit(text.substr(done, cut - done), out);
      done = cut;
      in_span_ = false;
      continue;
    }
    if (final) {  // never closed
      emit(text.substr(done), out);
      done = text.size();
      in_span_ = false;
    }
    break;
  }
  if (in_span_) scan_ -= done;
  pending_.erase(0, done);
}

}  // namespace cohere

namespace {

using ojson = nlohmann::ordered_json;

// Client text parsed as JSON is kept only this shallow (the server copies and dumps it recursively).
constexpr int kMaxOutputDepth = 64;

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

// A tool's result as an object: a JSON object string parsed, any other string as {"text": ...}.
ojson object_or_text(const std::string& text) {
  if (cohere::json_depth_within(text, kMaxOutputDepth)) {
    ojson parsed = ojson::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!parsed.is_discarded() && parsed.is_object()) return parsed;
  }
  return ojson{{"text", text}};
}

ojson as_object(const ojson& value) {
  if (value.is_object()) return value;
  if (value.is_string()) return object_or_text(value.get<std::string>());
  return ojson{{"text", value.dump(-1, ' ', false, ojson::error_handler_t::replace)}};
}

// Result `index` of a tool message's content, or null when there is none.
ojson tool_result(const ojson& content, int64_t index) {
  if (content.is_array()) {
    if (index < static_cast<int64_t>(content.size())) return as_object(content[static_cast<std::size_t>(index)]);
    return nullptr;
  }
  if (index != 0) return nullptr;
  if (content.is_string()) return object_or_text(content.get<std::string>());
  if (content.is_object()) return content;
  return nullptr;
}

std::string id_text(const ojson& id) {
  return id.is_string() ? id.get<std::string>() : id.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

}  // namespace

ojson citation_sources(const ojson& messages, const ojson& documents, const CitationRefs& refs) {
  const bool has_documents = documents.is_array() && !documents.empty();
  // The conversation's tool calls in the order the template numbers them, and each call's result message.
  std::vector<std::string> call_ids;
  std::unordered_map<std::string, const ojson*> results;
  if (messages.is_array()) {
    for (const auto& message : messages) {
      if (!message.is_object()) continue;
      const std::string role = message.contains("role") && message["role"].is_string()
                                   ? lower(message["role"].get<std::string>())
                                   : std::string();
      if ((role == "assistant" || role == "chatbot") && message.contains("tool_calls") &&
          message["tool_calls"].is_array()) {
        for (const auto& call : message["tool_calls"]) {
          const bool has_id = call.is_object() && call.contains("id") && call["id"].is_string();
          call_ids.push_back(has_id ? call["id"].get<std::string>() : std::string());
        }
      } else if (role == "tool" && message.contains("tool_call_id") && message["tool_call_id"].is_string()) {
        results.try_emplace(message["tool_call_id"].get<std::string>(), &message);
      }
    }
  }
  ojson sources = ojson::array();
  std::set<std::pair<std::string, std::string>> seen;  // (type, id) already returned
  const auto add = [&](ojson source) {
    if (seen.emplace(source["type"].get<std::string>(), source["id"].get<std::string>()).second) {
      sources.push_back(std::move(source));
    }
  };
  for (const auto& [ref_id, indices] : refs) {
    if (has_documents && ref_id == "0") {
      for (const int64_t i : indices) {
        if (i < 0 || i >= static_cast<int64_t>(documents.size())) continue;
        const ojson& document = documents[static_cast<std::size_t>(i)];
        const bool named = document.is_object() && document.contains("id") && !document["id"].is_null();
        ojson source = ojson::object();
        source["type"] = "document";
        source["id"] = named ? id_text(document["id"]) : "doc:" + std::to_string(i);
        source["document"] = as_object(document);
        add(std::move(source));
      }
      continue;
    }
    std::size_t number = 0;
    const auto [end, error] = std::from_chars(ref_id.data(), ref_id.data() + ref_id.size(), number);
    if (error != std::errc() || end != ref_id.data() + ref_id.size() || ref_id.empty()) continue;
    const std::size_t first = has_documents ? 1 : 0;
    if (number < first || number - first >= call_ids.size()) continue;
    const std::string& call_id = call_ids[number - first];
    const auto result = results.find(call_id);
    if (call_id.empty() || result == results.end() || !result->second->contains("content")) continue;
    const ojson& content = (*result->second)["content"];
    for (const int64_t i : indices) {
      if (i < 0) continue;
      ojson output = tool_result(content, i);
      if (output.is_null()) continue;
      ojson source = ojson::object();
      source["type"] = "tool";
      source["id"] = call_id + ":" + std::to_string(i);
      source["tool_output"] = std::move(output);
      add(std::move(source));
    }
  }
  return sources;
}

}  // namespace tide

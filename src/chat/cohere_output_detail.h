// The parts of CohereOutputParser (cohere_output.h) that stand alone: the action list's JSON, citation tags and
// the per-channel citation parser. Internal to src/chat; the unit tests use them directly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/cohere_output.h"

namespace tide::cohere {

// How the text at hand compares with something it may start: not at all, a proper prefix (more text decides),
// or the whole of it.
enum class Match { kNo, kPartial, kDone };

// Number of UTF-8 code points (bytes that are not continuation bytes).
int64_t count_code_points(std::string_view text);

// `pos` moved back (not below `floor`) to the start of the UTF-8 character it falls in, so that text released at
// a byte limit never splits a character.
std::size_t char_start_at_or_before(std::string_view text, std::size_t pos, std::size_t floor);

// Whether JSON text nests objects and arrays at most `max_depth` deep (strings are skipped; the text need not be
// valid). Deeper values are refused before nlohmann parses (or later copies or dumps) them recursively.
bool json_depth_within(std::string_view text, int max_depth);

// Follows JSON text character by character: whether each character lies inside a string literal (its quotes and
// escapes included) or outside, where brackets and markers count.
struct JsonStringTracker {
  bool in_string = false;
  bool escaped = false;  // inside a string, right after a backslash
  // Takes the next character; true when it lies outside every string.
  bool outside(char c) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      return false;
    }
    if (c == '"') {
      in_string = true;
      return false;
    }
    return true;
  }
};

// The body of an action block as tool calls: a JSON list of objects, each with a non-empty string "tool_name",
// an object (or null, or nothing) "parameters" and an optional "tool_call_id". nullopt when it is anything else
// (invalid or truncated JSON, an empty list, a missing name, ...).
std::optional<std::vector<ParsedToolCall>> parse_action_list(std::string_view body);

// A citation tag at the start of `text`: "<co>" or "<co: ID:[i,j],ID:[k]>" when `closing` is false, "</co>" or
// "</co: ...>" when true. Blanks are allowed around the punctuation of the sources.
struct CitationTag {
  Match match = Match::kNo;
  std::size_t length = 0;  // kDone: the tag's length in bytes
  bool has_sources = false;
  CitationRefs sources;
};
CitationTag match_citation_tag(std::string_view text, bool closing);

// One channel of output (content or reasoning): passes text through and, when citations are on, takes the
// citation tags out of it, reporting each span with its code-point offsets in the channel's clean text. Holds
// back a suffix that may still become an opening tag, and a span until its closing tag; a span without one (at
// flush(), or past max_held bytes) is released as the text it was, tags included.
class CitationChannel {
 public:
  CitationChannel(bool citations, bool in_reasoning, std::size_t max_held);

  // Text of the channel; what is settled is appended to `out` (its content or reasoning, and citations).
  void add(std::string_view text, CohereDelta& out);
  // Text that is not to be parsed (a malformed action block): settles what is held, then appends `text`.
  void add_raw(std::string_view text, CohereDelta& out);
  // The channel ends here (a marker, the end of the generation): everything held is settled as text.
  void flush(CohereDelta& out);

 private:
  void process(bool final, CohereDelta& out);
  void emit(std::string_view text, CohereDelta& out);

  bool citations_;
  bool in_reasoning_;
  std::size_t max_held_;
  std::string pending_;          // text not yet settled
  bool in_span_ = false;         // pending_ begins with an opening tag whose span is not yet closed
  std::size_t open_length_ = 0;  // the opening tag's length
  std::size_t scan_ = 0;         // in a span: pending_ before this holds no tag
  bool open_has_sources_ = false;
  CitationRefs open_sources_;
  int64_t emitted_code_points_ = 0;  // of the clean text so far
};

}  // namespace tide::cohere

// CohereOutputParser (see cohere_output.h): finds the markers, action blocks and legacy `Plan:` / `Action:` lines
// in the generated text and routes the rest to the content and reasoning channels (cohere_citations.cpp takes
// the citation tags out of those).
//
// Split-independence: the raw text waits in buf_ until it is settled, and every decision is taken at a position
// of the text with only what follows it deciding (a prefix that more text may still change waits unless the
// generation has ended; byte limits count from where a block starts). So any split of the same text takes the
// same decisions at the same places, and the deltas add up to the same result.
#include "chat/cohere_output.h"

#include <algorithm>

#include "chat/cohere_output_detail.h"

namespace tide {

namespace {

using cohere::Match;

enum class Marker { kStartThinking, kEndThinking, kStartResponse, kEndResponse, kStartAction, kEndAction, kEndOfTurn };

struct KnownMarker {
  std::string_view text;
  Marker marker;
};

// The markers that mean something here. Any other "<|...|>" is text; the end-of-turn tokens are dropped.
constexpr KnownMarker kMarkers[] = {
    {"<|START_THINKING|>", Marker::kStartThinking}, {"<|END_THINKING|>", Marker::kEndThinking},
    {"<|START_RESPONSE|>", Marker::kStartResponse}, {"<|END_RESPONSE|>", Marker::kEndResponse},
    {"<|START_ACTION|>", Marker::kStartAction},     {"<|END_ACTION|>", Marker::kEndAction},
    {"<|END_OF_TURN_TOKEN|>", Marker::kEndOfTurn},  {"<EOS_TOKEN>", Marker::kEndOfTurn},
};

struct MarkerMatch {
  Match match = Match::kNo;
  Marker marker = Marker::kEndOfTurn;
  std::size_t length = 0;
};

// A known marker at the start of `text`.
MarkerMatch match_marker(std::string_view text) {
  MarkerMatch result;
  for (const auto& known : kMarkers) {
    if (text.starts_with(known.text)) return {Match::kDone, known.marker, known.text.size()};
    if (known.text.starts_with(text)) result.match = Match::kPartial;
  }
  return result;
}

// `literal` at the start of `text` (kPartial: text is shorter and a prefix of it).
Match match_literal(std::string_view text, std::string_view literal) {
  const std::size_t n = std::min(text.size(), literal.size());
  if (text.substr(0, n) != literal.substr(0, n)) return Match::kNo;
  return n < literal.size() ? Match::kPartial : Match::kDone;
}

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// Blanks allowed around the legacy keywords ("  Plan:", "Action:\n```json") before they stop counting as such.
constexpr std::size_t kMaxKeywordBlanks = 64;

// `keyword` after up to kMaxKeywordBlanks blanks when `leading`, else `keyword`, blanks and `after`. `length`
// gets the matched length on kDone.
Match match_keyword(std::string_view text, bool leading, std::string_view keyword, std::string_view after,
                    std::size_t& length) {
  std::size_t i = 0;
  const auto blanks = [&] {
    const std::size_t start = i;
    while (i < text.size() && is_blank(text[i]) && i - start <= kMaxKeywordBlanks) ++i;
    return i - start <= kMaxKeywordBlanks;
  };
  if (leading && !blanks()) return Match::kNo;
  if (i == text.size()) return Match::kPartial;
  const Match word = match_literal(text.substr(i), keyword);
  if (word != Match::kDone) return word;
  i += keyword.size();
  if (!after.empty()) {
    if (!blanks()) return Match::kNo;
    if (i == text.size()) return Match::kPartial;
    const Match tail = match_literal(text.substr(i), after);
    if (tail != Match::kDone) return tail;
    i += after.size();
  }
  length = i;
  return Match::kDone;
}

// A legacy action line: "Action:", blanks, "```json".
Match match_action_header(std::string_view text, std::size_t& length) {
  return match_keyword(text, /*leading=*/false, "Action:", "```json", length);
}

std::string_view trim_blanks(std::string_view text) {
  while (!text.empty() && is_blank(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_blank(text.back())) text.remove_suffix(1);
  return text;
}

}  // namespace

struct CohereOutputParser::State {
  enum class Mode {
    kLegacyStart,  // legacy format, nothing settled yet: does the output start with "Plan:"?
    kText,         // text, markers and (legacy) action lines
    kPlanHold,     // legacy: buf_ holds "Plan: ..." until an action line (or anything else) follows
    kAction,       // buf_[opener, body) opened an action block; its body follows
  };
  enum class Block { kOutside, kThinking, kResponse };

  CohereFormat format;
  CohereParseOptions options;
  Mode mode = Mode::kText;
  Block block = Block::kOutside;
  std::string buf;          // raw text not yet settled
  bool line_start = true;   // buf[0] starts a line (the output's start, or after '\n')
  bool plan_done = false;   // legacy: the "Plan:" hold has been tried; text mode from now on
  std::size_t plan = 0;     // kPlanHold / kAction after it: the plan's text starts at buf[plan]
  std::size_t scan = 0;     // kPlanHold / kAction: buf[.., scan) is scanned
  std::size_t opener = 0;   // kAction: buf[opener, body) is "<|START_ACTION|>" or "Action: ```json"
  std::size_t body = 0;
  bool fence = false;       // kAction: a legacy block, closed by "```"
  cohere::JsonStringTracker json;  // kAction: where the scan is in the block's JSON
  cohere::CitationChannel content;
  cohere::CitationChannel reasoning;
  bool saw_tool_calls = false;
  bool finished = false;
  CohereDelta* out = nullptr;  // the delta being built

  State(CohereFormat format_in, const CohereParseOptions& options_in)
      : format(format_in),
        options(options_in),
        content(options_in.citations, /*in_reasoning=*/false, options_in.max_held_bytes),
        reasoning(options_in.citations, /*in_reasoning=*/true, options_in.max_held_bytes) {
    if (options.starts_in_thinking) block = Block::kThinking;
    plan_done = !(format == CohereFormat::kLegacyActions && options.tool_calls) || options.starts_in_thinking;
    if (!plan_done) mode = Mode::kLegacyStart;
  }

  void run(bool final) {
    for (;;) {
      bool more = false;
      switch (mode) {
        case Mode::kLegacyStart: more = step_legacy_start(final); break;
        case Mode::kText: more = step_text(final); break;
        case Mode::kPlanHold: more = step_plan(final); break;
        case Mode::kAction: more = step_action(final); break;
      }
      if (!more) break;
    }
    if (final) flush_channels();
  }

  // Drops buf[0, n) (settled).
  void consume(std::size_t n) {
    if (n == 0) return;
    line_start = buf[n - 1] == '\n';
    buf.erase(0, n);
  }

  void flush_channels() {
    content.flush(*out);
    reasoning.flush(*out);
  }

  // Settled text of the current block.
  void send_text(std::string_view text) {
    if (block != Block::kThinking) {
      content.add(text, *out);
    } else if (options.reasoning) {
      reasoning.add(text, *out);
    }
  }

  bool step_legacy_start(bool final) {
    std::size_t length = 0;
    const Match plan_match = match_keyword(buf, /*leading=*/true, "Plan:", "", length);
    if (plan_match == Match::kPartial && !final) return false;
    if (plan_match == Match::kDone) {
      mode = Mode::kPlanHold;
      plan = scan = length;
    } else {
      mode = Mode::kText;
      plan_done = true;
    }
    return true;
  }

  // The held plan is not followed by a valid action (or is too long): the text is read again from its start in
  // text mode, where "Plan:" is content.
  bool give_up_plan() {
    plan_done = true;
    mode = Mode::kText;
    return true;
  }

  bool step_plan(bool final) {
    const std::size_t limit = options.max_held_bytes;
    for (; scan < buf.size() && scan < limit; ++scan) {
      if (buf[scan - 1] == '\n' && buf[scan] == 'A') {
        std::size_t length = 0;
        const Match header = match_action_header(std::string_view(buf).substr(scan), length);
        if (header == Match::kDone) {
          start_action(scan, length, /*legacy=*/true);
          return true;
        }
        if (header == Match::kPartial && !final) return false;
      } else if (buf[scan] == '<') {
        const MarkerMatch marker = match_marker(std::string_view(buf).substr(scan));
        if (marker.match == Match::kDone) return give_up_plan();
        if (marker.match == Match::kPartial && !final) return false;
      }
    }
    if (scan >= limit || final) return give_up_plan();
    return false;
  }

  bool step_text(bool final) {
    const std::string_view text = buf;
    const bool legacy_actions = format == CohereFormat::kLegacyActions && options.tool_calls;
    for (std::size_t p = 0; p < text.size(); ++p) {
      const bool at_line_start = p == 0 ? line_start : text[p - 1] == '\n';
      if (legacy_actions && at_line_start && text[p] == 'A' && block == Block::kOutside) {
        std::size_t length = 0;
        const Match header = match_action_header(text.substr(p), length);
        if (header == Match::kDone) {
          send_text(text.substr(0, p));
          consume(p);
          start_action(0, length, /*legacy=*/true);
          return true;
        }
        if (header == Match::kPartial && !final) return settle_before(p);
      }
      if (text[p] != '<') continue;
      const MarkerMatch marker = match_marker(text.substr(p));
      if (marker.match == Match::kPartial && !final) return settle_before(p);
      if (marker.match != Match::kDone) continue;
      const bool action_marker = marker.marker == Marker::kStartAction || marker.marker == Marker::kEndAction;
      if (action_marker && !options.tool_calls) {  // text, like any other unknown marker
        p += marker.length - 1;
        continue;
      }
      send_text(text.substr(0, p));
      if (marker.marker == Marker::kStartAction) {
        consume(p);
        start_action(0, marker.length, /*legacy=*/false);
        return true;
      }
      consume(p + marker.length);
      on_marker(marker.marker);
      return true;
    }
    send_text(text);
    consume(text.size());
    return false;
  }

  // Settles the text before buf[p], which may still become a marker or an action line, and waits for more.
  bool settle_before(std::size_t p) {
    send_text(std::string_view(buf).substr(0, p));
    consume(p);
    return false;
  }

  void on_marker(Marker marker) {
    flush_channels();  // a marker ends any citation span
    switch (marker) {
      case Marker::kStartThinking: block = Block::kThinking; break;
      case Marker::kStartResponse: block = Block::kResponse; break;
      case Marker::kEndThinking:
        if (block == Block::kThinking) block = Block::kOutside;
        break;
      case Marker::kEndResponse:
        if (block == Block::kResponse) block = Block::kOutside;
        break;
      default: break;  // a stray <|END_ACTION|> or an end-of-turn token: dropped
    }
  }

  // An action block opens at buf[opener_at] with an opener of `length` bytes.
  void start_action(std::size_t opener_at, std::size_t length, bool legacy) {
    flush_channels();
    mode = Mode::kAction;
    block = Block::kOutside;
    opener = opener_at;
    body = scan = opener_at + length;
    fence = legacy;
    json = {};
  }

  bool step_action(bool final) {
    const std::size_t limit = body + options.max_held_bytes;
    for (; scan < buf.size() && scan < limit; ++scan) {
      const char c = buf[scan];
      if (!json.outside(c)) continue;
      if (c == '<') {
        // A marker outside the JSON's strings ends the block: <|END_ACTION|> as it should, any other before it.
        const MarkerMatch marker = match_marker(std::string_view(buf).substr(scan));
        if (marker.match == Match::kDone) {
          const bool closes = !fence && marker.marker == Marker::kEndAction;
          return end_action(scan, closes ? scan + marker.length : scan);
        }
        if (marker.match == Match::kPartial && !final) return false;
      } else if (fence && c == '`') {
        const Match close = match_literal(std::string_view(buf).substr(scan), "```");
        if (close == Match::kDone) return end_action(scan, scan + 3);
        if (close == Match::kPartial && !final) return false;
      }
    }
    if (scan >= limit) {  // too long: the opener and the body so far are text
      if (opener > 0) return give_up_plan();
      const std::size_t cut = cohere::char_start_at_or_before(buf, limit, body);
      content.add_raw(std::string_view(buf).substr(0, cut), *out);
      consume(cut);
      mode = Mode::kText;
      return true;
    }
    if (final) return end_action(buf.size(), buf.size());
    return false;
  }

  // The action's body is buf[body, body_end); the block ends at buf[end].
  bool end_action(std::size_t body_end, std::size_t end) {
    auto calls = cohere::parse_action_list(std::string_view(buf).substr(body, body_end - body));
    if (!calls) {
      if (opener > 0) return give_up_plan();
      content.add_raw(std::string_view(buf).substr(0, end), *out);  // unchanged, markers included
      consume(end);
      mode = Mode::kText;
      return true;
    }
    if (opener > 0 && options.reasoning) {  // the legacy plan before a valid action is its reasoning
      reasoning.add(trim_blanks(std::string_view(buf).substr(plan, opener - plan)), *out);
      reasoning.flush(*out);
    }
    for (auto& call : *calls) out->tool_calls.push_back(std::move(call));
    saw_tool_calls = true;
    consume(end);
    mode = Mode::kText;
    plan_done = true;
    return true;
  }
};

CohereOutputParser::CohereOutputParser(CohereFormat format, CohereParseOptions options)
    : state_(std::make_unique<State>(format, options)) {}
CohereOutputParser::~CohereOutputParser() = default;
CohereOutputParser::CohereOutputParser(CohereOutputParser&&) noexcept = default;
CohereOutputParser& CohereOutputParser::operator=(CohereOutputParser&&) noexcept = default;

CohereDelta CohereOutputParser::feed(std::string_view text) {
  CohereDelta delta;
  if (state_->finished || text.empty()) return delta;
  state_->out = &delta;
  state_->buf.append(text);
  state_->run(/*final=*/false);
  state_->out = nullptr;
  return delta;
}

CohereDelta CohereOutputParser::finish() {
  CohereDelta delta;
  if (state_->finished) return delta;
  state_->finished = true;
  state_->out = &delta;
  state_->run(/*final=*/true);
  state_->out = nullptr;
  return delta;
}

bool CohereOutputParser::saw_tool_calls() const { return state_->saw_tool_calls; }

std::optional<CohereFormat> cohere_format_of_template(std::string_view template_source) {
  if (template_source.find("<|START_ACTION|>") != std::string_view::npos) return CohereFormat::kActions;
  if (template_source.find("Action:") != std::string_view::npos &&
      template_source.find("```json") != std::string_view::npos) {
    return CohereFormat::kLegacyActions;
  }
  return std::nullopt;
}

}  // namespace tide

#include "server/constraints.h"

#include <algorithm>

#include "grammar/choice.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/regex.h"
#include "server/api_error.h"

namespace tide::server {
namespace {

using json = nlohmann::ordered_json;
using grammar::Element;
using grammar::Grammar;

void set_bit(std::span<uint32_t> words, int32_t id) {
  if (id >= 0 && static_cast<size_t>(id / 32) < words.size()) words[static_cast<size_t>(id / 32)] |= 1u << (id % 32);
}
void clear_bit(std::span<uint32_t> words, int32_t id) {
  if (id >= 0 && static_cast<size_t>(id / 32) < words.size()) words[static_cast<size_t>(id / 32)] &= ~(1u << (id % 32));
}
bool has_bit(std::span<const uint32_t> words, int32_t id) {
  return id >= 0 && static_cast<size_t>(id / 32) < words.size() && ((words[static_cast<size_t>(id / 32)] >> (id % 32)) & 1u);
}

// What surrounds the constrained text (see constraints.h), and the compiled text itself.
struct FrameSpec : TokenConstraintSpec {
  std::shared_ptr<const grammar::CompiledGrammar> body;
  std::optional<int32_t> think_open, think_close;  // a thinking block may come first when both are set
  std::optional<int32_t> open, close;              // the markers around the body, when they are single tokens
  bool open_required = false;
  // An alternative to the body: a free answer between these markers (tool calls the model may not make).
  std::optional<int32_t> free_open, free_close;
  std::shared_ptr<const std::vector<uint32_t>> free_text;  // every ordinary token: a thinking block's text

  std::unique_ptr<TokenConstraint> start() const override;
};

class FramedConstraint : public TokenConstraint {
 public:
  explicit FramedConstraint(const FrameSpec& spec)
      : spec_(spec), matcher_(spec.body), phase_(spec.open || spec.think_open ? Phase::kLead : Phase::kBody) {}

  void fill_mask(std::span<uint32_t> words) override {
    switch (phase_) {
      case Phase::kLead:
        if (spec_.open_required) {
          std::fill(words.begin(), words.end(), 0u);
        } else {
          matcher_.fill_mask(words);  // the body may start at once, without its opening marker
        }
        if (thinking_allowed()) set_bit(words, *spec_.think_open);
        if (spec_.open) set_bit(words, *spec_.open);
        if (spec_.free_open) set_bit(words, *spec_.free_open);
        return;
      case Phase::kFree:
      case Phase::kThinking: {
        const std::vector<uint32_t>& text = *spec_.free_text;
        const size_t n = std::min(words.size(), text.size());
        std::copy_n(text.begin(), n, words.begin());
        std::fill(words.begin() + static_cast<std::ptrdiff_t>(n), words.end(), 0u);
        set_bit(words, phase_ == Phase::kThinking ? *spec_.think_close : *spec_.free_close);
        return;
      }
      case Phase::kBody:
        matcher_.fill_mask(words);
        if (opened_) {
          // An opened body ends with its closing marker, not with the end of the turn.
          for (int32_t id : matcher_.vocabulary().stop_ids()) clear_bit(words, id);
          if (spec_.close && matcher_.can_end()) set_bit(words, *spec_.close);
        }
        return;
      case Phase::kDone:
        std::fill(words.begin(), words.end(), 0u);
        for (int32_t id : matcher_.vocabulary().stop_ids()) set_bit(words, id);
        return;
    }
  }

  std::unique_ptr<TokenConstraint> clone() const override { return std::make_unique<FramedConstraint>(*this); }

  bool accept(int32_t token) override {
    switch (phase_) {
      case Phase::kLead:
        if (thinking_allowed() && token == *spec_.think_open) {
          phase_ = Phase::kThinking;
          return true;
        }
        if (spec_.open && token == *spec_.open) {
          phase_ = Phase::kBody;
          opened_ = true;
          return true;
        }
        if (spec_.free_open && token == *spec_.free_open) {
          phase_ = Phase::kFree;
          return true;
        }
        if (!spec_.open_required && matcher_.accept_token(token)) {
          phase_ = Phase::kBody;
          return true;
        }
        return false;
      case Phase::kFree:
        if (token == *spec_.free_close) {
          phase_ = Phase::kDone;
          return true;
        }
        return has_bit(*spec_.free_text, token);
      case Phase::kThinking:
        if (token == *spec_.think_close) {
          thought_ = true;
          phase_ = Phase::kLead;
          return true;
        }
        return has_bit(*spec_.free_text, token);
      case Phase::kBody:
        if (opened_ && spec_.close && token == *spec_.close && matcher_.can_end()) {
          phase_ = Phase::kDone;
          return true;
        }
        return matcher_.accept_token(token);
      case Phase::kDone:
        return false;
    }
    return false;
  }

 private:
  enum class Phase { kLead, kThinking, kFree, kBody, kDone };
  bool thinking_allowed() const { return spec_.think_open && spec_.think_close && !thought_; }

  const FrameSpec& spec_;
  grammar::GrammarMatcher matcher_;
  Phase phase_;
  bool thought_ = false;
  bool opened_ = false;
};

std::unique_ptr<TokenConstraint> FrameSpec::start() const { return std::make_unique<FramedConstraint>(*this); }

// The rules of `from` copied into `into`; returns a reference to its root.
Element include(Grammar& into, const Grammar& from, const std::string& prefix) {
  const auto offset = static_cast<int32_t>(into.rules.size());
  for (const grammar::Rule& rule : from.rules) into.add_rule(prefix + rule.name);
  for (size_t r = 0; r < from.rules.size(); ++r) {
    for (grammar::Sequence seq : from.rules[r].alternatives) {
      for (Element& e : seq) {
        if (e.kind == Element::Kind::kRule) e.rule += offset;
      }
      into.add_alternative(offset + static_cast<int32_t>(r), std::move(seq));
    }
  }
  return Grammar::ref(offset + from.root);
}

// Cohere's action list: [{"tool_call_id": "0", "tool_name": NAME, "parameters": ARGS}, ...], with the
// whitespace Cohere's models write around the list and between calls.
Grammar action_grammar(const json& tools, const std::optional<std::string>& name, bool single, bool with_markers,
                       const std::string& field) {
  Grammar g;
  const int32_t root = g.add_rule("root");
  const int32_t call = g.add_rule("call");
  const Element ws = g.repeat(Grammar::char_class({{' ', ' '}, {'\t', '\t'}, {'\n', '\n'}}), 0, 16);
  const Element id = g.repeat(Grammar::char_class({{'0', '9'}}), 1, 4);
  bool any = false;
  for (const json& tool : tools) {
    const json& function = tool["function"];
    const std::string tool_name = function["name"].get<std::string>();
    if (name && tool_name != *name) continue;
    Grammar parameters;
    try {
      const json* schema = function.contains("parameters") && !function["parameters"].is_null() ? &function["parameters"] : nullptr;
      parameters = schema ? grammar::compile_json_schema(*schema) : grammar::any_json();
    } catch (const grammar::GrammarError& e) {
      bad_request(field, "tool '" + tool_name + "': " + e.what());
    }
    const Element args = include(g, parameters, "tool_" + std::to_string(g.rules.size()) + "_");
    g.add_alternative(call, {Grammar::literal("{\"tool_call_id\": \""), id,
                             Grammar::literal("\", \"tool_name\": " + json(tool_name).dump() + ", \"parameters\": "), args,
                             Grammar::literal("}")});
    any = true;
  }
  if (!any) bad_request(field, "no tool named '" + name.value_or("") + "' among the request's tools");
  grammar::Sequence list = {ws, Grammar::literal("["), ws, Grammar::ref(call)};
  if (!single) {
    list.push_back(g.star(g.group({{Grammar::literal(","), ws, Grammar::ref(call)}}, "more_calls")));
  }
  list.insert(list.end(), {ws, Grammar::literal("]"), ws});
  if (with_markers) {
    list.insert(list.begin(), Grammar::literal("<|START_ACTION|>"));
    list.push_back(Grammar::literal("<|END_ACTION|>"));
  }
  g.add_alternative(root, std::move(list));
  g.root = root;
  return g;
}

}  // namespace

ConstraintCache::ConstraintCache(const Tokenizer& tokenizer, std::vector<int32_t> stop_ids, size_t capacity)
    : vocabulary_(grammar::TokenVocabulary::from_tokenizer(tokenizer, std::move(stop_ids))), capacity_(capacity) {
  auto free_text = std::make_shared<std::vector<uint32_t>>(vocabulary_->mask_words(), 0u);
  for (int32_t id = 0; id < vocabulary_->size(); ++id) {
    if (!vocabulary_->is_never_allowed(id) && !vocabulary_->is_stop(id)) set_bit(*free_text, id);
  }
  free_text_ = std::move(free_text);
  auto marker = [&](const char* text) -> std::optional<int32_t> { return tokenizer.token_to_id(text); };
  markers_.think_open = marker("<|START_THINKING|>");
  markers_.think_close = marker("<|END_THINKING|>");
  markers_.response_open = marker("<|START_RESPONSE|>");
  markers_.response_close = marker("<|END_RESPONSE|>");
  markers_.action_open = marker("<|START_ACTION|>");
  markers_.action_close = marker("<|END_ACTION|>");
}

std::shared_ptr<const grammar::CompiledGrammar> ConstraintCache::compiled(const std::string& key,
                                                                          const std::function<Grammar()>& make) {
  {
    std::lock_guard lock(mutex_);
    if (const auto it = cache_.find(key); it != cache_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.second);
      ++stats_.hits;
      return it->second.first;
    }
  }
  // Compiled outside the lock: other requests go on meanwhile (two requests may compile the same key once each).
  std::shared_ptr<const grammar::CompiledGrammar> compiled = grammar::compile(make(), vocabulary_);
  std::lock_guard lock(mutex_);
  ++stats_.compiled;
  if (const auto it = cache_.find(key); it != cache_.end()) return it->second.first;
  lru_.push_front(key);
  cache_.emplace(key, std::make_pair(compiled, lru_.begin()));
  while (cache_.size() > capacity_) {
    cache_.erase(lru_.back());
    lru_.pop_back();
  }
  return compiled;
}

std::shared_ptr<const TokenConstraintSpec> ConstraintCache::structured(const StructuredOutput& output,
                                                                      ConstraintFrame frame) {
  using Kind = StructuredOutput::Kind;
  std::string key;
  std::function<Grammar()> make;
  switch (output.kind) {
    case Kind::kJsonObject:
      key = "object";
      make = [] { return grammar::any_json(); };
      break;
    case Kind::kJsonSchema:
      key = "schema:" + output.schema.dump();
      make = [&] { return grammar::compile_json_schema(output.schema); };
      break;
    case Kind::kRegex:
      key = "regex:" + output.text;
      make = [&] { return grammar::compile_regex(output.text); };
      break;
    case Kind::kChoice:
      key = "choice:" + json(output.choices).dump();
      make = [&] { return grammar::compile_choice(output.choices); };
      break;
    case Kind::kGrammar:
      key = "gbnf:" + output.text;
      make = [&] { return grammar::parse_gbnf(output.text); };
      break;
  }
  auto spec = std::make_shared<FrameSpec>();
  try {
    spec->body = compiled(key, make);
  } catch (const grammar::GrammarError& e) {
    bad_request(output.field, std::string("the output constraint is refused: ") + e.what());
  }
  spec->free_text = free_text_;
  if (frame == ConstraintFrame::kCohereResponse) {
    spec->think_open = markers_.think_open;
    spec->think_close = markers_.think_close;
    if (markers_.response_open && markers_.response_close) {
      spec->open = markers_.response_open;
      spec->close = markers_.response_close;
    }
  }
  return spec;
}

std::shared_ptr<const TokenConstraintSpec> ConstraintCache::tool_calls(const json& tools,
                                                                      const std::optional<std::string>& name,
                                                                      bool single, bool optional,
                                                                      const std::string& field) {
  const bool markers = markers_.action_open && markers_.action_close;
  if (optional && !(markers && markers_.response_open && markers_.response_close)) {
    bad_request(field, "constraining tool calls the model may also not make needs a vocabulary with Cohere's "
                       "<|START_ACTION|> and <|START_RESPONSE|> markers as single tokens");
  }
  const std::string key = std::string("tools:") + (single ? "1:" : "n:") + (markers ? "m:" : "t:") +
                          name.value_or("") + ":" + tools.dump();
  auto spec = std::make_shared<FrameSpec>();
  try {
    spec->body = compiled(key, [&] { return action_grammar(tools, name, single, !markers, field); });
  } catch (const grammar::GrammarError& e) {
    bad_request(field, std::string("the tools' schemas are refused: ") + e.what());
  }
  spec->free_text = free_text_;
  spec->think_open = markers_.think_open;
  spec->think_close = markers_.think_close;
  if (markers) {
    spec->open = markers_.action_open;
    spec->close = markers_.action_close;
    spec->open_required = true;
  }
  if (optional) {
    spec->free_open = markers_.response_open;
    spec->free_close = markers_.response_close;
  }
  return spec;
}

ConstraintCache::Stats ConstraintCache::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace tide::server

#include "tokenizer/pre_tokenizer.h"

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace tide {
namespace jf = json_fields;

namespace {

// HF Digits: every numeric character (Rust char::is_numeric) is isolated, or runs of them are kept together
// when `individual` is false; the text between them stays one piece.
void split_digits(std::string_view text, bool individual, std::vector<std::string>& out) {
  size_t piece_start = 0;
  bool piece_numeric = false;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t start = pos;
    const bool numeric = utf8::is_numeric(utf8::next_code_point(text, pos));
    const bool boundary = numeric != piece_numeric || (numeric && individual);
    if (boundary) {
      if (start > piece_start) out.emplace_back(text.substr(piece_start, start - piece_start));
      piece_start = start;
    }
    piece_numeric = numeric;
  }
  if (pos > piece_start) out.emplace_back(text.substr(piece_start));
}

void split_byte_level(std::string_view text, bool add_prefix_space, bool use_regex,
                      std::vector<std::string>& out) {
  std::string prefixed;
  // HF prepends the space to every piece reaching ByteLevel, not only to the first one of the input.
  if (add_prefix_space && !text.empty() && text.front() != ' ') {
    prefixed.reserve(text.size() + 1);
    prefixed.push_back(' ');
    prefixed.append(text);
    text = prefixed;
  }
  std::vector<std::string_view> pieces;
  if (use_regex) {
    byte_level::split_gpt2(text, pieces);
  } else if (!text.empty()) {
    pieces.push_back(text);
  }
  for (const std::string_view piece : pieces) {
    std::string mapped;
    mapped.reserve(piece.size() * 2);
    byte_level::encode_bytes(piece, mapped);
    out.push_back(std::move(mapped));
  }
}

}  // namespace

PreTokenizer PreTokenizer::from_json(const jf::Json* value, const std::string& path) {
  PreTokenizer pre_tokenizer;
  if (value != nullptr) parse_into(*value, path, pre_tokenizer.steps_);
  return pre_tokenizer;
}

void PreTokenizer::parse_into(const jf::Json& value, const std::string& path, std::vector<Step>& steps) {
  const std::string& type = jf::type_of(value, path);
  if (type == "Digits") {
    Step step{Step::Kind::kDigits};
    step.individual_digits = jf::bool_or(value, "individual_digits", false, path);
    steps.push_back(step);
  } else if (type == "ByteLevel") {
    Step step{Step::Kind::kByteLevel};
    step.add_prefix_space = jf::bool_or(value, "add_prefix_space", true, path);
    step.use_regex = jf::bool_or(value, "use_regex", true, path);
    steps.push_back(step);
  } else if (type == "Sequence") {
    const std::string list_path = jf::child(path, "pretokenizers");
    const jf::Json& list = jf::as_array(jf::require(value, "pretokenizers", path), list_path);
    for (size_t i = 0; i < list.size(); ++i) parse_into(list[i], jf::element(list_path, i), steps);
  } else {
    fail("{}: unsupported pre_tokenizer type '{}' (tide supports Digits, ByteLevel, Sequence, null)",
         jf::child(path, "type"), type);
  }
}

void PreTokenizer::apply(const Step& step, const std::vector<std::string>& pieces, std::vector<std::string>& out) {
  for (const std::string& piece : pieces) {
    if (step.kind == Step::Kind::kDigits) {
      split_digits(piece, step.individual_digits, out);
    } else {
      split_byte_level(piece, step.add_prefix_space, step.use_regex, out);
    }
  }
}

void PreTokenizer::split(std::string_view text, std::vector<std::string>& words) const {
  if (text.empty()) return;
  std::vector<std::string> pieces{std::string(text)};
  std::vector<std::string> next;
  for (const Step& step : steps_) {
    next.clear();
    apply(step, pieces, next);
    pieces.swap(next);
  }
  for (std::string& piece : pieces) {
    if (!piece.empty()) words.push_back(std::move(piece));
  }
}

}  // namespace tide

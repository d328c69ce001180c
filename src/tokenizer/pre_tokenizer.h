// The "pre_tokenizer" of tokenizer.json: cuts a normalized text segment into the words the BPE model sees.
// Supports Digits (individual or contiguous), ByteLevel (GPT-2 regex split + byte-to-char mapping, with
// add_prefix_space / use_regex), a Sequence of those, and null. Non-goals: offsets, and the other HF
// pre-tokenizers (Split, Metaspace, Whitespace, ...), which are rejected at load with an error naming the type.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/json_fields.h"

namespace tide {

class PreTokenizer {
 public:
  // Parses `value` (nullptr for a null/absent pre-tokenizer); throws tide::Error naming what is unsupported.
  static PreTokenizer from_json(const json_fields::Json* value, const std::string& path);

  // Appends the words of `text` (valid UTF-8, already normalized) to `words`, each step applied to every
  // piece of the previous one as HF does. Empty pieces are dropped.
  void split(std::string_view text, std::vector<std::string>& words) const;

 private:
  struct Step {
    enum class Kind { kDigits, kByteLevel } kind;
    bool individual_digits = false;
    bool add_prefix_space = false;
    bool use_regex = true;
  };
  static void parse_into(const json_fields::Json& value, const std::string& path, std::vector<Step>& steps);
  static void apply(const Step& step, const std::vector<std::string>& pieces, std::vector<std::string>& out);

  std::vector<Step> steps_;
};

}  // namespace tide

// The "post_processor" of tokenizer.json, reduced to what single-sequence encoding needs: the special ids a
// TemplateProcessing "single" template puts before and after $A (e.g. "<BOS_TOKEN> $A"). ByteLevel (offsets
// only), a Sequence of supported processors, and null are accepted. Non-goals: pair templates, type ids,
// offsets; Bert/Roberta processors are rejected at load with an error naming the type.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/json_fields.h"

namespace tide {

class PostProcessor {
 public:
  // Parses `value` (nullptr for null/absent); throws tide::Error naming what is unsupported or malformed.
  static PostProcessor from_json(const json_fields::Json* value, const std::string& path);

  // Wraps `ids` with the template's special ids (the caller applies it only when add_special_tokens).
  std::vector<int32_t> apply(std::vector<int32_t> ids) const;

  // Special ids the template puts before / after the sequence.
  const std::vector<int32_t>& prefix() const { return prefix_; }
  const std::vector<int32_t>& suffix() const { return suffix_; }

 private:
  void parse_into(const json_fields::Json& value, const std::string& path);
  void parse_template(const json_fields::Json& value, const std::string& path);

  std::vector<int32_t> prefix_;
  std::vector<int32_t> suffix_;
  bool has_template_ = false;
};

}  // namespace tide

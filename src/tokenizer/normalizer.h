// The "normalizer" of tokenizer.json: Unicode normalization forms (NFC, NFD, NFKC, NFKD via utf8proc), a
// Sequence of them, or null. Non-goals: the other HF normalizers (Lowercase, Replace, Precompiled, ...),
// which are rejected at load with an error naming the type.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/json_fields.h"

namespace tide {

class Normalizer {
 public:
  // Parses `value` (nullptr for a null/absent normalizer); throws tide::Error naming the unsupported type.
  static Normalizer from_json(const json_fields::Json* value, const std::string& path);

  // Normalizes valid UTF-8 text; returns it unchanged when no normalizer is configured.
  std::string apply(std::string_view text) const;

 private:
  enum class Form { kNfc, kNfd, kNfkc, kNfkd };
  static void parse_into(const json_fields::Json& value, const std::string& path, std::vector<Form>& forms);

  std::vector<Form> forms_;
};

}  // namespace tide

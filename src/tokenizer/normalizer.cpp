#include "tokenizer/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

#include "core/error.h"

namespace tide {
namespace jf = json_fields;

namespace {

bool is_ascii(std::string_view text) {
  for (const char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

}  // namespace

Normalizer Normalizer::from_json(const jf::Json* value, const std::string& path) {
  Normalizer normalizer;
  if (value != nullptr) parse_into(*value, path, normalizer.forms_);
  return normalizer;
}

void Normalizer::parse_into(const jf::Json& value, const std::string& path, std::vector<Form>& forms) {
  const std::string& type = jf::type_of(value, path);
  if (type == "NFC") {
    forms.push_back(Form::kNfc);
  } else if (type == "NFD") {
    forms.push_back(Form::kNfd);
  } else if (type == "NFKC") {
    forms.push_back(Form::kNfkc);
  } else if (type == "NFKD") {
    forms.push_back(Form::kNfkd);
  } else if (type == "Sequence") {
    const std::string list_path = jf::child(path, "normalizers");
    const jf::Json& list = jf::as_array(jf::require(value, "normalizers", path), list_path);
    for (size_t i = 0; i < list.size(); ++i) parse_into(list[i], jf::element(list_path, i), forms);
  } else {
    fail("{}: unsupported normalizer type '{}' (tide supports NFC, NFD, NFKC, NFKD, Sequence, null)",
         jf::child(path, "type"), type);
  }
}

std::string Normalizer::apply(std::string_view text) const {
  std::string result(text);
  for (const Form form : forms_) {
    // ASCII is invariant under every normalization form; skipping it keeps long English prompts cheap.
    if (is_ascii(result)) break;
    int options = UTF8PROC_STABLE;
    switch (form) {
      case Form::kNfc: options |= UTF8PROC_COMPOSE; break;
      case Form::kNfd: options |= UTF8PROC_DECOMPOSE; break;
      case Form::kNfkc: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
      case Form::kNfkd: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
    }
    utf8proc_uint8_t* output = nullptr;
    // An explicit length (no UTF8PROC_NULLTERM) keeps embedded NUL characters.
    const utf8proc_ssize_t length =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(result.data()),
                     static_cast<utf8proc_ssize_t>(result.size()), &output, static_cast<utf8proc_option_t>(options));
    std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(output, &std::free);
    if (length < 0) fail("tokenizer: Unicode normalization failed: {}", utf8proc_errmsg(length));
    result.assign(reinterpret_cast<const char*>(output), static_cast<size_t>(length));
  }
  return result;
}

}  // namespace tide

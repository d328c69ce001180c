#include "tokenizer/post_processor.h"

#include "core/error.h"

namespace tide {
namespace jf = json_fields;

PostProcessor PostProcessor::from_json(const jf::Json* value, const std::string& path) {
  PostProcessor processor;
  if (value != nullptr) processor.parse_into(*value, path);
  return processor;
}

void PostProcessor::parse_into(const jf::Json& value, const std::string& path) {
  const std::string& type = jf::type_of(value, path);
  if (type == "TemplateProcessing") {
    if (has_template_) fail("{}: more than one TemplateProcessing is not supported", path);
    parse_template(value, path);
    has_template_ = true;
  } else if (type == "ByteLevel") {
    // Only trims offsets, which tide does not produce: nothing to do for ids.
  } else if (type == "Sequence") {
    const std::string list_path = jf::child(path, "processors");
    const jf::Json& list = jf::as_array(jf::require(value, "processors", path), list_path);
    for (size_t i = 0; i < list.size(); ++i) parse_into(list[i], jf::element(list_path, i));
  } else {
    fail("{}: unsupported post_processor type '{}' (tide supports TemplateProcessing, ByteLevel, Sequence, null)",
         jf::child(path, "type"), type);
  }
}

// "single": [{"SpecialToken": {"id": "<BOS_TOKEN>", ...}}, {"Sequence": {"id": "A", ...}}], whose special
// tokens resolve through "special_tokens": {"<BOS_TOKEN>": {"ids": [5], ...}}.
void PostProcessor::parse_template(const jf::Json& value, const std::string& path) {
  const std::string specials_path = jf::child(path, "special_tokens");
  const jf::Json* specials = jf::find(value, "special_tokens", path);
  if (specials != nullptr) jf::as_object(*specials, specials_path);
  const std::string single_path = jf::child(path, "single");
  const jf::Json& single = jf::as_array(jf::require(value, "single", path), single_path);
  bool seen_sequence = false;
  for (size_t i = 0; i < single.size(); ++i) {
    const std::string piece_path = jf::element(single_path, i);
    const jf::Json& piece = jf::as_object(single[i], piece_path);
    if (const jf::Json* sequence = jf::find(piece, "Sequence", piece_path)) {
      const std::string seq_path = jf::child(piece_path, "Sequence");
      const std::string& id = jf::as_string(jf::require(*sequence, "id", seq_path), jf::child(seq_path, "id"));
      if (id != "A" || seen_sequence) fail("{}: a single template must use sequence $A exactly once", seq_path);
      seen_sequence = true;
    } else if (const jf::Json* special = jf::find(piece, "SpecialToken", piece_path)) {
      const std::string special_path = jf::child(piece_path, "SpecialToken");
      const std::string& name =
          jf::as_string(jf::require(*special, "id", special_path), jf::child(special_path, "id"));
      const jf::Json* entry = specials == nullptr ? nullptr : jf::find(*specials, name, specials_path);
      if (entry == nullptr) fail("{}: special token '{}' is not defined in {}", special_path, name, specials_path);
      const std::string ids_path = jf::child(jf::child(specials_path, name), "ids");
      const jf::Json& ids = jf::as_array(jf::require(*entry, "ids", jf::child(specials_path, name)), ids_path);
      for (size_t k = 0; k < ids.size(); ++k) {
        (seen_sequence ? suffix_ : prefix_).push_back(jf::as_token_id(ids[k], jf::element(ids_path, k)));
      }
    } else {
      fail("{} must hold a \"Sequence\" or a \"SpecialToken\"", piece_path);
    }
  }
  if (!seen_sequence) fail("{}: the single template has no $A sequence", single_path);
}

std::vector<int32_t> PostProcessor::apply(std::vector<int32_t> ids) const {
  if (prefix_.empty() && suffix_.empty()) return ids;
  std::vector<int32_t> result;
  result.reserve(prefix_.size() + ids.size() + suffix_.size());
  result.insert(result.end(), prefix_.begin(), prefix_.end());
  result.insert(result.end(), ids.begin(), ids.end());
  result.insert(result.end(), suffix_.begin(), suffix_.end());
  return result;
}

}  // namespace tide

// allOf: two schemas merged into one whose instances are exactly those valid against both, where that is a
// matter of taking the tighter bound, intersecting types and enums, uniting required names and merging the
// shared properties. Anything else (two different patterns, two anyOfs, additionalProperties that depend on
// the other member's properties) is refused. Also $ref resolution (local JSON pointers only).
#include <fmt/format.h>

#include <algorithm>

#include "grammar/json_schema_compiler.h"

namespace tide::grammar::detail {
namespace {

constexpr int kMaxMergeDepth = 32;

std::vector<std::string> type_list(const Json& type, const std::string& ptr) {
  std::vector<std::string> out;
  if (type.is_string()) return {type.get<std::string>()};
  if (!type.is_array()) refuse("type must be a string or an array of strings", ptr);
  for (const Json& t : type) {
    if (!t.is_string()) refuse("type must be a string or an array of strings", ptr);
    out.push_back(t.get<std::string>());
  }
  return out;
}

Json intersect_types(const Json& a, const Json& b, const std::string& ptr) {
  const auto ta = type_list(a, ptr), tb = type_list(b, ptr);
  auto has = [](const std::vector<std::string>& list, const std::string& t) {
    return std::find(list.begin(), list.end(), t) != list.end();
  };
  Json out = Json::array();
  for (const std::string& t : ta) {
    if (has(tb, t) || (t == "integer" && has(tb, "number"))) out.push_back(t);
    else if (t == "number" && has(tb, "integer")) out.push_back("integer");
  }
  if (out.empty()) refuse("allOf members have no type in common", ptr);
  if (out.size() == 1) return out[0];
  return out;
}

// Which of two numeric bounds is tighter: the larger lower bound, the smaller upper bound.
Json tighter(const Json& a, const Json& b, bool lower, const std::string& key, const std::string& ptr) {
  if (!a.is_number() || !b.is_number()) refuse(fmt::format("allOf: cannot merge differing '{}'", key), ptr);
  const bool a_wins = lower ? a.get<double>() >= b.get<double>() : a.get<double>() <= b.get<double>();
  return a_wins ? a : b;
}

std::set<std::string> property_names(const Json& schema) {
  std::set<std::string> names;
  if (schema.contains("properties") && schema["properties"].is_object()) {
    for (const auto& item : schema["properties"].items()) names.insert(item.key());
  }
  return names;
}

}  // namespace

const Json& SchemaCompiler::resolve_ref(const std::string& ref, const std::string& ptr, std::string* target) {
  if (ref.empty() || ref[0] != '#') {
    refuse(fmt::format("$ref '{}' is not supported (only local references \"#/...\" are)", ref), ptr);
  }
  // The fragment is a URI fragment: percent-decoded, then a JSON pointer.
  std::string fragment;
  for (size_t i = 1; i < ref.size(); ++i) {
    if (ref[i] == '%' && i + 2 < ref.size() && std::isxdigit(static_cast<unsigned char>(ref[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(ref[i + 2]))) {
      fragment += static_cast<char>(std::stoi(ref.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      fragment += ref[i];
    }
  }
  if (!fragment.empty() && fragment[0] != '/') {
    refuse(fmt::format("$ref '{}' is not supported (anchors are not; use a JSON pointer)", ref), ptr);
  }
  const Json* node = &root_;
  std::string canonical;
  size_t pos = 0;
  while (pos < fragment.size()) {
    const size_t next = fragment.find('/', pos + 1);
    std::string token = fragment.substr(pos + 1, next == std::string::npos ? std::string::npos : next - pos - 1);
    pos = next == std::string::npos ? fragment.size() : next;
    std::string key;
    for (size_t i = 0; i < token.size(); ++i) {
      if (token[i] == '~' && i + 1 < token.size() && (token[i + 1] == '0' || token[i + 1] == '1')) {
        key += token[i + 1] == '0' ? '~' : '/';
        ++i;
      } else {
        key += token[i];
      }
    }
    if (node->is_object() && node->contains(key)) {
      node = &(*node)[key];
    } else if (node->is_array() && !key.empty() && key.size() < 10 &&
               std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
               std::stoul(key) < node->size()) {
      node = &(*node)[std::stoul(key)];
    } else {
      refuse(fmt::format("$ref '{}' points to nothing", ref), ptr);
    }
    canonical = pointer_join(canonical, key);
  }
  *target = canonical;
  return *node;
}

Json SchemaCompiler::merge(const Json& a_in, const Json& b_in, const std::string& ptr, int depth) {
  if (depth > kMaxMergeDepth) refuse("allOf / $ref merges nest too deeply", ptr);
  DepthGuard guard(*this, ptr);
  // Booleans: true adds nothing, false admits nothing.
  if (a_in.is_boolean() || b_in.is_boolean()) {
    const Json& boolean = a_in.is_boolean() ? a_in : b_in;
    const Json& other = a_in.is_boolean() ? b_in : a_in;
    if (!boolean.get<bool>()) refuse("the schema false admits no value", ptr);
    return other;
  }
  if (!a_in.is_object() || !b_in.is_object()) refuse("a schema must be an object or a boolean", ptr);
  // Each side without its own $ref and allOf first.
  auto flatten = [&](const Json& s) -> Json {
    Json out = s;
    if (out.contains("$ref")) {
      if (!out["$ref"].is_string()) refuse("$ref must be a string", ptr);
      std::string target;
      const Json& resolved = resolve_ref(out["$ref"].get<std::string>(), ptr, &target);
      out.erase("$ref");
      out = merge(resolved, out, ptr, depth + 1);
    }
    if (out.contains("allOf")) {
      const Json members = out["allOf"];
      if (!members.is_array() || members.empty()) refuse("allOf must be a non-empty array", ptr);
      out.erase("allOf");
      for (const Json& member : members) out = merge(out, member, ptr, depth + 1);
    }
    return out;
  };
  const Json a = flatten(a_in), b = flatten(b_in);
  Json out = a;
  for (const auto& item : b.items()) {
    const std::string& key = item.key();
    const Json& vb = item.value();
    if (is_annotation_keyword(key) && key != "$defs" && key != "definitions") continue;
    if (!out.contains(key)) {
      out[key] = vb;
      continue;
    }
    const Json va = out[key];
    if (va == vb) continue;
    if (key == "type") {
      out[key] = intersect_types(va, vb, ptr);
    } else if (key == "required") {
      if (!va.is_array() || !vb.is_array()) refuse("required must be an array", ptr);
      Json names = va;
      for (const Json& n : vb) {
        if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
      }
      out[key] = names;
    } else if (key == "properties") {
      if (!va.is_object() || !vb.is_object()) refuse("properties must be an object", ptr);
      Json props = va;
      for (const auto& p : vb.items()) {
        props[p.key()] = props.contains(p.key())
                             ? merge(props[p.key()], p.value(), pointer_join(ptr + "/properties", p.key()), depth + 1)
                             : p.value();
      }
      out[key] = props;
    } else if (key == "minimum" || key == "exclusiveMinimum" || key == "minLength" || key == "minItems") {
      out[key] = tighter(va, vb, true, key, ptr);
    } else if (key == "maximum" || key == "exclusiveMaximum" || key == "maxLength" || key == "maxItems") {
      out[key] = tighter(va, vb, false, key, ptr);
    } else if (key == "enum") {
      if (!va.is_array() || !vb.is_array()) refuse("enum must be an array", ptr);
      Json common = Json::array();
      for (const Json& v : va) {
        if (std::find(vb.begin(), vb.end(), v) != vb.end()) common.push_back(v);
      }
      if (common.empty()) refuse("allOf members have no enum value in common", ptr);
      out[key] = common;
    } else if (key == "items" && (va.is_object() || va.is_boolean()) && (vb.is_object() || vb.is_boolean())) {
      out[key] = merge(va, vb, ptr + "/items", depth + 1);
    } else if (key == "$defs" || key == "definitions") {
      continue;  // references are resolved against the root document, never against a merged member
    } else {
      refuse(fmt::format("allOf members with differing '{}' cannot be merged", key), ptr);
    }
  }
  // additionalProperties (false or a schema) in one member applies to the properties another member lists
  // that it does not: that is not a merge of keywords, so it is refused.
  for (const Json* side : {&a, &b}) {
    if (!side->contains("additionalProperties") || (*side)["additionalProperties"] == true) continue;
    const std::set<std::string> own = property_names(*side);
    for (const std::string& name : property_names(out)) {
      if (!own.count(name)) {
        refuse(fmt::format("allOf: additionalProperties of one member constrains the property '{}' of another", name),
               ptr);
      }
    }
  }
  return out;
}

}  // namespace tide::grammar::detail

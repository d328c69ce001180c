// compile_json_schema: the dispatch over a schema's keywords ($ref, allOf, anyOf / oneOf, enum / const, type),
// $ref rules, the layout helpers and the keyword lists. Objects and arrays are in json_schema_object.cpp,
// strings in json_schema_string.cpp, numbers in json_schema_number.cpp, allOf merging in json_schema_merge.cpp.
#include "grammar/json_schema.h"

#include <fmt/format.h>

#include <algorithm>

#include "grammar/json_schema_compiler.h"

namespace tide::grammar {
namespace detail {

namespace {

// Keywords whose value says nothing about which instances are valid.
const std::set<std::string> kAnnotations = {
    "$schema",     "$id",         "$comment",   "$anchor",  "$dynamicAnchor", "$recursiveAnchor", "$vocabulary",
    "$defs",       "definitions", "title",      "description", "default",     "examples",        "example",
    "deprecated",  "readOnly",    "writeOnly",  "contentMediaType", "contentEncoding", "contentSchema",
    "discriminator", "xml",       "externalDocs", "strict"};

// JSON Schema keywords the engine does not enforce: refused rather than silently ignored.
const std::set<std::string> kUnsupported = {
    "not",           "if",           "then",           "else",          "patternProperties", "propertyNames",
    "dependentSchemas", "dependentRequired", "dependencies", "uniqueItems", "multipleOf",     "contains",
    "minContains",   "maxContains",  "minProperties",  "maxProperties", "unevaluatedProperties",
    "unevaluatedItems", "$dynamicRef", "$recursiveRef"};

const std::set<std::string> kObjectKeywords = {"properties", "required", "additionalProperties"};
const std::set<std::string> kArrayKeywords = {"items", "prefixItems", "additionalItems", "minItems", "maxItems"};
const std::set<std::string> kStringKeywords = {"minLength", "maxLength", "pattern", "format"};
const std::set<std::string> kNumberKeywords = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};

bool has_any(const Json& schema, const std::set<std::string>& keys) {
  for (const auto& item : schema.items()) {
    if (keys.count(item.key())) return true;
  }
  return false;
}

// Whether a schema has keywords beyond annotations (ignoring those in `except`).
bool constrains(const Json& schema, std::initializer_list<const char*> except) {
  for (const auto& item : schema.items()) {
    if (is_annotation_keyword(item.key())) continue;
    if (std::any_of(except.begin(), except.end(), [&](const char* k) { return item.key() == k; })) continue;
    return true;
  }
  return false;
}

Json without(const Json& schema, std::initializer_list<const char*> keys) {
  Json out = schema;
  for (const char* key : keys) out.erase(key);
  return out;
}

size_t code_points(const std::string& s) {
  return static_cast<size_t>(std::count_if(s.begin(), s.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}

bool type_matches(const Json& value, const std::string& type) {
  if (type == "null") return value.is_null();
  if (type == "boolean") return value.is_boolean();
  if (type == "string") return value.is_string();
  if (type == "object") return value.is_object();
  if (type == "array") return value.is_array();
  if (type == "number") return value.is_number();
  if (type == "integer") {
    if (value.is_number_integer()) return true;
    return value.is_number_float() && std::isfinite(value.get<double>()) &&
           value.get<double>() == std::floor(value.get<double>());
  }
  return false;
}

// Whether an enum / const value meets the schema's type, length and numeric-bound keywords.
bool value_fits(const Json& v, const Json& schema) {
  if (schema.contains("type")) {
    const Json& type = schema["type"];
    bool any = false;
    if (type.is_string()) any = type_matches(v, type.get<std::string>());
    if (type.is_array()) {
      for (const Json& t : type) any = any || (t.is_string() && type_matches(v, t.get<std::string>()));
    }
    if (!any) return false;
  }
  auto number = [&](const char* key) { return schema.contains(key) && schema[key].is_number(); };
  if (v.is_string()) {
    const size_t n = code_points(v.get<std::string>());
    if (number("minLength") && static_cast<double>(n) < schema["minLength"].get<double>()) return false;
    if (number("maxLength") && static_cast<double>(n) > schema["maxLength"].get<double>()) return false;
  }
  if (v.is_number()) {
    const double x = v.get<double>();
    if (number("minimum") && x < schema["minimum"].get<double>()) return false;
    if (number("maximum") && x > schema["maximum"].get<double>()) return false;
    if (number("exclusiveMinimum") && x <= schema["exclusiveMinimum"].get<double>()) return false;
    if (number("exclusiveMaximum") && x >= schema["exclusiveMaximum"].get<double>()) return false;
  }
  if (v.is_array()) {
    if (number("minItems") && static_cast<double>(v.size()) < schema["minItems"].get<double>()) return false;
    if (number("maxItems") && static_cast<double>(v.size()) > schema["maxItems"].get<double>()) return false;
  }
  return true;
}

std::string rule_hint(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (std::isalnum(static_cast<unsigned char>(c))) out += c;
    else if (!out.empty() && out.back() != '-') out += '-';
    if (out.size() >= 40) break;
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out.empty() ? "value" : out;
}

}  // namespace

bool is_annotation_keyword(const std::string& key) { return kAnnotations.count(key) > 0; }
bool is_unsupported_keyword(const std::string& key) { return kUnsupported.count(key) > 0; }

std::string pointer_join(const std::string& ptr, const std::string& token) {
  std::string out = ptr + "/";
  for (char c : token) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

void refuse_keyword(const std::string& keyword, const std::string& ptr) {
  throw GrammarError(fmt::format("unsupported JSON Schema keyword '{}' at {}", keyword, ptr.empty() ? "/" : ptr));
}

void refuse(const std::string& message, const std::string& ptr) {
  throw GrammarError(fmt::format("JSON Schema: {} at {}", message, ptr.empty() ? "/" : ptr));
}

std::string canonical_json(const Json& value) {
  if (value.is_object()) {
    std::string out = "{";
    bool first = true;
    for (const auto& item : value.items()) {
      if (!first) out += ", ";
      first = false;
      out += Json(item.key()).dump() + ": " + canonical_json(item.value());
    }
    return out + "}";
  }
  if (value.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < value.size(); ++i) out += (i ? ", " : "") + canonical_json(value[i]);
    return out + "]";
  }
  return value.dump();
}

SchemaCompiler::SchemaCompiler(const Json& root, const JsonSchemaOptions& opts) : options(opts), root_(root) {
  if (options.max_whitespace < 0 || options.max_whitespace > 1024) {
    throw GrammarError("JSON Schema: max_whitespace must be within 0..1024");
  }
}

SchemaCompiler::DepthGuard::DepthGuard(SchemaCompiler& c, const std::string& ptr) : compiler(c) {
  if (++c.depth_ > c.options.max_depth) {
    --c.depth_;
    refuse(fmt::format("the schema nests deeper than {} levels", c.options.max_depth), ptr);
  }
  if (++c.nodes_ > c.options.max_schema_nodes) {
    --c.depth_;
    refuse(fmt::format("the schema has more than {} subschemas", c.options.max_schema_nodes), ptr);
  }
  if (c.grammar.rules.size() > kMaxRules) {
    --c.depth_;
    refuse("the grammar grows beyond its bound", ptr);
  }
}

Grammar SchemaCompiler::compile() {
  const Element root = ref_value("#", "");
  grammar.root = root.rule;
  grammar.validate();
  return std::move(grammar);
}

Grammar SchemaCompiler::compile_any_object() {
  grammar.root = grammar.add_rule("root");
  grammar.add_alternative(grammar.root, {any_object()});
  grammar.validate();
  return std::move(grammar);
}

Element SchemaCompiler::value(const Json& schema, const std::string& ptr) {
  DepthGuard guard(*this, ptr);
  if (schema.is_boolean()) {
    if (schema.get<bool>()) return any_value();
    refuse("the schema false admits no value", ptr);
  }
  if (!schema.is_object()) refuse("a schema must be an object or a boolean", ptr);
  for (const auto& item : schema.items()) {
    if (!is_unsupported_keyword(item.key())) continue;
    if (item.key() == "uniqueItems" && item.value() == false) continue;
    refuse_keyword(item.key(), ptr);
  }
  if (schema.contains("$ref")) {
    if (!schema["$ref"].is_string()) refuse("$ref must be a string", ptr);
    const std::string ref = schema["$ref"].get<std::string>();
    if (!constrains(schema, {"$ref"})) return ref_value(ref, ptr);
    // Keywords beside $ref apply too (2019-09 and later): merged into the target.
    std::string target;
    const Json& resolved = resolve_ref(ref, ptr, &target);
    return value(merge(resolved, without(schema, {"$ref"}), ptr, 0), ptr);
  }
  if (schema.contains("allOf")) {
    const Json& members = schema["allOf"];
    if (!members.is_array() || members.empty()) refuse("allOf must be a non-empty array", ptr);
    Json merged = without(schema, {"allOf"});
    for (size_t i = 0; i < members.size(); ++i) {
      merged = merge(merged, members[i], ptr + "/allOf/" + std::to_string(i), 0);
    }
    return value(merged, ptr);
  }
  if (schema.contains("anyOf") || schema.contains("oneOf")) {
    if (schema.contains("anyOf") && schema.contains("oneOf")) refuse("anyOf beside oneOf is not supported", ptr);
    const char* key = schema.contains("anyOf") ? "anyOf" : "oneOf";
    const Json& branches = schema[key];
    if (!branches.is_array() || branches.empty()) refuse(fmt::format("{} must be a non-empty array", key), ptr);
    const Json rest = without(schema, {"anyOf", "oneOf"});
    const bool shared = constrains(rest, {});
    std::vector<Sequence> alternatives;
    for (size_t i = 0; i < branches.size(); ++i) {
      const std::string branch_ptr = ptr + "/" + key + "/" + std::to_string(i);
      // Keywords beside anyOf apply to every branch: merged into each.
      alternatives.push_back({shared ? value(merge(rest, branches[i], branch_ptr, 0), branch_ptr)
                                     : value(branches[i], branch_ptr)});
    }
    return alternatives.size() == 1 ? alternatives[0][0] : rule("anyOf", std::move(alternatives));
  }
  if (schema.contains("enum") || schema.contains("const")) return enum_value(schema, ptr);
  return typed_value(schema, ptr);
}

Element SchemaCompiler::ref_value(const std::string& ref, const std::string& ptr) {
  std::string target;
  const Json& resolved = resolve_ref(ref, ptr, &target);
  if (std::find(direct_refs_.begin(), direct_refs_.end(), target) != direct_refs_.end()) {
    refuse(fmt::format("$ref '{}' recurses without adding text", ref), ptr);
  }
  const auto cached = ref_rules_.find(target);
  if (cached != ref_rules_.end()) return Grammar::ref(cached->second);
  const int32_t r = grammar.add_rule(target == "" ? "root" : rule_hint(target));
  ref_rules_.emplace(target, r);
  direct_refs_.push_back(target);
  const Element body = value(resolved, target);
  direct_refs_.pop_back();
  grammar.add_alternative(r, {body});
  return Grammar::ref(r);
}

Element SchemaCompiler::enum_value(const Json& schema, const std::string& ptr) {
  std::vector<Json> values;
  if (schema.contains("enum")) {
    if (!schema["enum"].is_array()) refuse("enum must be an array", ptr);
    if (schema["enum"].size() > options.max_enum_values) {
      refuse(fmt::format("enum has more than {} values", options.max_enum_values), ptr);
    }
    values.assign(schema["enum"].begin(), schema["enum"].end());
  }
  if (schema.contains("const")) {
    if (schema.contains("enum") && std::find(values.begin(), values.end(), schema["const"]) == values.end()) {
      refuse("const is not among the enum values", ptr);
    }
    values = {schema["const"]};
  }
  std::vector<Sequence> alternatives;
  std::set<std::string> seen;
  for (const Json& v : values) {
    if (!value_fits(v, schema)) continue;  // a value the schema's other keywords exclude
    std::string text;
    try {
      text = canonical_json(v);
    } catch (const nlohmann::json::exception&) {
      refuse("an enum value is not valid UTF-8", ptr);
    }
    if (seen.insert(text).second) alternatives.push_back({Grammar::literal(text)});
  }
  if (alternatives.empty()) refuse("no enum / const value is valid against the schema", ptr);
  return alternatives.size() == 1 ? alternatives[0][0] : rule("enum", std::move(alternatives));
}

Element SchemaCompiler::typed_value(const Json& schema, const std::string& ptr) {
  std::vector<std::string> types;
  if (schema.contains("type")) {
    const Json& type = schema["type"];
    if (type.is_string()) {
      types.push_back(type.get<std::string>());
    } else if (type.is_array() && !type.empty()) {
      for (const Json& t : type) {
        if (!t.is_string()) refuse("type must be a string or an array of strings", ptr);
        types.push_back(t.get<std::string>());
      }
    } else {
      refuse("type must be a string or a non-empty array of strings", ptr);
    }
  } else {
    // No type: the types the keywords present describe (a subset of what is valid: the model writes the
    // kind of value the schema talks about), or any value.
    if (has_any(schema, kObjectKeywords)) types.push_back("object");
    if (has_any(schema, kArrayKeywords)) types.push_back("array");
    if (has_any(schema, kStringKeywords)) types.push_back("string");
    if (has_any(schema, kNumberKeywords)) types.push_back("number");
    if (types.empty()) return any_value();
  }
  std::vector<Sequence> alternatives;
  for (const std::string& type : types) alternatives.push_back({type_value(type, schema, ptr)});
  return alternatives.size() == 1 ? alternatives[0][0] : rule("types", std::move(alternatives));
}

Element SchemaCompiler::type_value(const std::string& type, const Json& schema, const std::string& ptr) {
  if (type == "null") return Grammar::literal("null");
  if (type == "boolean") return rule("boolean", {{Grammar::literal("true")}, {Grammar::literal("false")}});
  if (type == "string") return string_value(schema, ptr);
  if (type == "integer") return number_value(schema, ptr, true);
  if (type == "number") return number_value(schema, ptr, false);
  if (type == "object") return object_value(schema, ptr);
  if (type == "array") return array_value(schema, ptr);
  refuse(fmt::format("unknown type '{}'", type), ptr);
}

// --- layout ---

void SchemaCompiler::append_literal(Sequence& seq, const std::string& bytes) {
  if (bytes.empty()) return;
  if (!seq.empty() && seq.back().kind == Element::Kind::kLiteral) {
    seq.back().bytes += bytes;
  } else {
    seq.push_back(Grammar::literal(bytes));
  }
}

void SchemaCompiler::append_element(Sequence& seq, Element e) {
  if (e.kind == Element::Kind::kLiteral) return append_literal(seq, e.bytes);
  seq.push_back(std::move(e));
}

void SchemaCompiler::append_ws(Sequence& seq) {
  if (!options.any_whitespace || options.max_whitespace == 0) return;
  if (!ws_) {
    ws_ = grammar.repeat(Grammar::char_class({{'\t', '\n'}, {'\r', '\r'}, {' ', ' '}}), 0, options.max_whitespace);
  }
  seq.push_back(*ws_);
}

void SchemaCompiler::append_comma(Sequence& seq) {
  if (!options.any_whitespace) return append_literal(seq, ", ");
  append_ws(seq);
  append_literal(seq, ",");
  append_ws(seq);
}

void SchemaCompiler::append_colon(Sequence& seq) {
  if (!options.any_whitespace) return append_literal(seq, ": ");
  append_ws(seq);
  append_literal(seq, ":");
  append_ws(seq);
}

void SchemaCompiler::append_open(Sequence& seq, const char* bracket) {
  append_literal(seq, bracket);
  append_ws(seq);
}

void SchemaCompiler::append_close(Sequence& seq, const char* bracket) {
  append_ws(seq);
  append_literal(seq, bracket);
}

Element SchemaCompiler::rule(const std::string& hint, std::vector<Sequence> alternatives) {
  return grammar.group(std::move(alternatives), hint);
}

Element SchemaCompiler::repeat(const Element& e, int64_t min, int64_t max) {
  const int64_t n = max - min;
  if (max == -1 || n <= 64) return grammar.repeat(e, min, max);
  // Lengths 0..n as a chunks of k and b more (a < q, b < k), or q chunks and at most r more (n = q k + r):
  // each length has one split, so a matcher follows at most two of them at a time.
  int64_t k = 1;
  while (k * k < n) ++k;
  const int64_t q = n / k, r = n % k;
  const Element chunk = rule("chunk", {Sequence(static_cast<size_t>(k), e)});
  Sequence below{grammar.repeat(e, 0, k - 1)};
  if (q > 1) below.insert(below.begin(), grammar.repeat(chunk, 0, q - 1));
  Sequence full{grammar.repeat(chunk, q, q)};
  if (r > 0) full.push_back(grammar.repeat(e, 0, r));
  Sequence seq;
  if (min > 0) seq.push_back(grammar.repeat(e, min, min));
  seq.push_back(rule("upto", {std::move(below), std::move(full)}));
  return element_of(std::move(seq));
}

Element SchemaCompiler::element_of(Sequence seq) {
  if (seq.size() == 1) return seq[0];
  return rule("seq", {std::move(seq)});
}

}  // namespace detail

Grammar compile_json_schema(const nlohmann::ordered_json& schema, const JsonSchemaOptions& options) {
  return detail::SchemaCompiler(schema, options).compile();
}

Grammar any_json(const JsonSchemaOptions& options) {
  return detail::SchemaCompiler(nlohmann::ordered_json::object(), options).compile_any_object();
}

}  // namespace tide::grammar

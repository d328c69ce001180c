// Objects (properties in schema order, optional ones skippable, additional members after them), arrays
// (prefixItems, items, counts) and the schema-free JSON value.
#include <fmt/format.h>

#include "grammar/json_schema_compiler.h"

namespace tide::grammar::detail {
namespace {

// Sequences copied into their predecessors stay short; a longer one becomes a rule of its own.
constexpr size_t kMaxInline = 32;

}  // namespace

int64_t count_keyword(const Json& schema, const char* key, int64_t fallback, const std::string& ptr) {
  if (!schema.contains(key)) return fallback;
  const Json& v = schema[key];
  const bool integral = v.is_number_integer() || v.is_number_unsigned() ||
                        (v.is_number_float() && v.get<double>() == std::floor(v.get<double>()));
  if (!integral || v.get<double>() < 0) refuse(fmt::format("{} must be a non-negative integer", key), ptr);
  if (v.get<double>() > static_cast<double>(kMaxRepeat)) {
    if (std::string(key).rfind("max", 0) == 0) return -1;  // a bound beyond what is enforced: none
    refuse(fmt::format("{} above {} is not supported", key, kMaxRepeat), ptr);
  }
  return v.get<int64_t>();
}

Element SchemaCompiler::object_value(const Json& schema, const std::string& ptr) {
  ProgressScope progress(*this);  // "{" comes first: recursion below adds text
  const Json empty = Json::object();
  const Json& properties = schema.contains("properties") ? schema["properties"] : empty;
  if (!properties.is_object()) refuse("properties must be an object", ptr);
  std::vector<std::string> required_order;
  std::set<std::string> required;
  if (schema.contains("required")) {
    if (!schema["required"].is_array()) refuse("required must be an array of strings", ptr);
    for (const Json& name : schema["required"]) {
      if (!name.is_string()) refuse("required must be an array of strings", ptr);
      if (required.insert(name.get<std::string>()).second) required_order.push_back(name.get<std::string>());
    }
  }
  Json additional = true;
  if (schema.contains("additionalProperties")) {
    additional = schema["additionalProperties"];
  } else if (options.strict && (!properties.empty() || !required.empty())) {
    additional = false;
  }
  if (!additional.is_boolean() && !additional.is_object()) refuse("additionalProperties must be a schema", ptr);
  const std::string additional_ptr = ptr + "/additionalProperties";

  struct Member {
    std::string name;
    Element value;
    bool required;
  };
  std::vector<Member> members;
  std::vector<std::string> names;
  for (const auto& item : properties.items()) {
    const std::string prop_ptr = pointer_join(ptr + "/properties", item.key());
    members.push_back({item.key(), value(item.value(), prop_ptr), required.count(item.key()) > 0});
    names.push_back(item.key());
  }
  for (const std::string& name : required_order) {
    if (properties.contains(name)) continue;
    // A required name without a schema of its own: an additional member that must be present.
    if (additional == false) {
      refuse(fmt::format("the required property '{}' is excluded by additionalProperties false", name), ptr);
    }
    members.push_back({name, value(additional, additional_ptr), true});
    names.push_back(name);
  }
  std::optional<Element> extra;  // one additional member: a key none of the names above, its value
  if (additional != false) {
    Sequence member{key_not_in(names)};
    append_colon(member);
    append_element(member, value(additional, additional_ptr));
    extra = element_of(std::move(member));
  }

  // Built from the last member back. after: the rest given that a member was written (each member then
  // starts with a comma); first: the rest given that none was.
  auto as_sequence = [&](std::vector<Sequence> alternatives) -> Sequence {
    if (alternatives.size() == 1 && alternatives[0].size() <= kMaxInline) return alternatives[0];
    return {rule("members", std::move(alternatives))};
  };
  std::vector<Sequence> after{{}}, first{{}};
  if (extra) {
    Sequence comma_member;
    append_comma(comma_member);
    append_element(comma_member, *extra);
    const Element more = grammar.star(element_of(std::move(comma_member)));
    after = {{more}};
    first = {{}, {*extra, more}};
  }
  for (size_t i = members.size(); i-- > 0;) {
    const Sequence rest_after = as_sequence(std::move(after));
    Sequence key;
    append_literal(key, canonical_json(Json(members[i].name)));
    append_colon(key);
    append_element(key, members[i].value);
    Sequence with_comma;
    append_comma(with_comma);
    for (const Element& e : key) append_element(with_comma, e);
    for (const Element& e : rest_after) append_element(with_comma, e);
    Sequence as_first = key;
    for (const Element& e : rest_after) append_element(as_first, e);
    if (members[i].required) {
      after = {std::move(with_comma)};
      first = {std::move(as_first)};
    } else {
      after = {std::move(with_comma), rest_after};
      first = {std::move(as_first), as_sequence(std::move(first))};
    }
  }
  Sequence object;
  append_open(object, "{");
  for (const Element& e : as_sequence(std::move(first))) append_element(object, e);
  append_close(object, "}");
  return element_of(std::move(object));
}

Element SchemaCompiler::array_value(const Json& schema, const std::string& ptr) {
  ProgressScope progress(*this);  // "[" comes first
  // Positional items: prefixItems (2020-12), or items given as an array (drafts 4-7).
  std::vector<const Json*> prefix;
  std::string prefix_ptr;
  const Json* rest = nullptr;
  std::string rest_ptr;
  const Json empty = Json::object();
  if (schema.contains("prefixItems")) {
    if (!schema["prefixItems"].is_array()) refuse("prefixItems must be an array", ptr);
    for (const Json& s : schema["prefixItems"]) prefix.push_back(&s);
    prefix_ptr = ptr + "/prefixItems/";
    if (schema.contains("items")) rest = &schema["items"], rest_ptr = ptr + "/items";
  } else if (schema.contains("items") && schema["items"].is_array()) {
    for (const Json& s : schema["items"]) prefix.push_back(&s);
    prefix_ptr = ptr + "/items/";
    if (schema.contains("additionalItems")) rest = &schema["additionalItems"], rest_ptr = ptr + "/additionalItems";
  } else if (schema.contains("items")) {
    rest = &schema["items"], rest_ptr = ptr + "/items";
  }
  const Json strict_rest = false;
  const Json any_rest = true;
  if (rest == nullptr) rest = (options.strict && !prefix.empty()) ? &strict_rest : &any_rest, rest_ptr = ptr;
  if (!rest->is_boolean() && !rest->is_object()) refuse("items must be a schema", rest_ptr);

  const int64_t k = static_cast<int64_t>(prefix.size());
  const int64_t min = count_keyword(schema, "minItems", 0, ptr);
  int64_t max = count_keyword(schema, "maxItems", -1, ptr);
  if (*rest == false) max = max == -1 ? k : std::min(max, k);
  if (max != -1 && min > max) refuse("no array length meets minItems, maxItems and the items", ptr);

  const int64_t written_prefix = max == -1 ? k : std::min(k, max);  // prefix positions that may be written
  std::vector<Element> items;
  for (int64_t j = 0; j < written_prefix; ++j) items.push_back(value(*prefix[j], prefix_ptr + std::to_string(j)));
  std::optional<Element> item;
  if (max == -1 || max > k) item = value(*rest, rest_ptr);

  Sequence content;
  if (written_prefix == 0) {
    if (item) {  // item (", " item){min-1, max-1}
      Sequence comma_item;
      append_comma(comma_item);
      append_element(comma_item, *item);
      Sequence some{*item};
      if (max != 1) {
        some.push_back(repeat(element_of(std::move(comma_item)), std::max<int64_t>(0, min - 1),
                                      max == -1 ? -1 : max - 1));
      }
      content = min == 0 ? Sequence{rule("items", {std::move(some), {}})} : std::move(some);
    }
  } else {
    // After the prefix: (", " item){min-k, max-k}.
    Sequence tail;
    if (item) {
      Sequence comma_item;
      append_comma(comma_item);
      append_element(comma_item, *item);
      tail.push_back(repeat(element_of(std::move(comma_item)), std::max<int64_t>(0, min - k),
                                    max == -1 ? -1 : max - k));
    }
    // Prefix positions from the last back; position j (j >= min) may end the array.
    for (int64_t j = written_prefix; j-- > 0;) {
      Sequence seq;
      if (j > 0) append_comma(seq);
      append_element(seq, items[j]);
      if (tail.size() > kMaxInline) tail = {rule("items", {std::move(tail)})};
      for (const Element& e : tail) append_element(seq, e);
      tail = j >= min ? Sequence{rule("items", {std::move(seq), {}})} : std::move(seq);
    }
    content = std::move(tail);
  }
  Sequence array;
  append_open(array, "[");
  for (const Element& e : content) append_element(array, e);
  append_close(array, "]");
  return element_of(std::move(array));
}

Element SchemaCompiler::any_value() {
  if (any_value_) return *any_value_;
  const int32_t r = grammar.add_rule("value");
  any_value_ = Grammar::ref(r);
  const Json empty = Json::object();
  grammar.add_alternative(r, {any_object()});
  // [value (", " value)*]
  Sequence comma_value;
  append_comma(comma_value);
  comma_value.push_back(*any_value_);
  Sequence array;
  append_open(array, "[");
  array.push_back(rule("values", {{*any_value_, grammar.star(element_of(std::move(comma_value)))}, {}}));
  append_close(array, "]");
  grammar.add_alternative(r, std::move(array));
  grammar.add_alternative(r, {string_value(empty, "")});
  grammar.add_alternative(r, {number_value(empty, "", false)});
  grammar.add_alternative(r, {Grammar::literal("true")});
  grammar.add_alternative(r, {Grammar::literal("false")});
  grammar.add_alternative(r, {Grammar::literal("null")});
  return *any_value_;
}

Element SchemaCompiler::any_object() {
  if (any_object_) return *any_object_;
  const int32_t r = grammar.add_rule("object");
  any_object_ = Grammar::ref(r);
  // {member (", " member)*} with member = string ": " value (keys may repeat).
  Sequence member{string_value(Json::object(), "")};
  append_colon(member);
  member.push_back(any_value());
  const Element member_element = element_of(std::move(member));
  Sequence comma_member;
  append_comma(comma_member);
  comma_member.push_back(member_element);
  Sequence object;
  append_open(object, "{");
  object.push_back(rule("members", {{member_element, grammar.star(element_of(std::move(comma_member)))}, {}}));
  append_close(object, "}");
  grammar.add_alternative(r, std::move(object));
  return *any_object_;
}

}  // namespace tide::grammar::detail

// The JSON Schema compiler's internals, shared by json_schema*.cpp (not part of the public API).
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "grammar/json_schema.h"

namespace tide::grammar::detail {

using Json = nlohmann::ordered_json;

// The JSON pointer of a member: ptr + "/" + the escaped token (~ -> ~0, / -> ~1).
std::string pointer_join(const std::string& ptr, const std::string& token);

// Refusals name the keyword and where it is.
[[noreturn]] void refuse_keyword(const std::string& keyword, const std::string& ptr);
[[noreturn]] void refuse(const std::string& message, const std::string& ptr);

// A count keyword (minItems, maxLength, ...): a non-negative integer, `fallback` when absent. A max* above
// kMaxRepeat reads as no bound; a min* above it is refused.
int64_t count_keyword(const Json& schema, const char* key, int64_t fallback, const std::string& ptr);

// A JSON value printed in the layout the grammar uses (", " and ": " separators).
std::string canonical_json(const Json& value);

// A non-negative decimal: digits of the integer part (no leading zeros, "0" for zero) and of the fraction
// (no trailing zeros, empty for a whole number).
struct Decimal {
  bool negative = false;
  std::string whole = "0";
  std::string fraction;
};

class SchemaCompiler {
 public:
  SchemaCompiler(const Json& root, const JsonSchemaOptions& options);

  Grammar compile();         // the root schema's language
  Grammar compile_any_object();

  // --- json_schema.cpp: dispatch, $ref, enum/const, anyOf, type inference ---
  Element value(const Json& schema, const std::string& ptr);

  // --- json_schema_merge.cpp: allOf and keywords beside $ref / anyOf ---
  Json merge(const Json& a, const Json& b, const std::string& ptr, int depth);
  const Json& resolve_ref(const std::string& ref, const std::string& ptr, std::string* target);

  // --- json_schema_object.cpp: objects, arrays, any value ---
  Element object_value(const Json& schema, const std::string& ptr);
  Element array_value(const Json& schema, const std::string& ptr);
  Element any_value();
  Element any_object();

  // --- json_schema_string.cpp: strings, patterns, formats, object keys ---
  Element string_value(const Json& schema, const std::string& ptr);
  Element json_char();                                    // one character of a JSON string, any spelling
  Element key_not_in(const std::vector<std::string>& names);  // a quoted key that is none of `names`

  // --- json_schema_number.cpp ---
  Element number_value(const Json& schema, const std::string& ptr, bool integer);

  // --- layout ---
  void append_literal(Sequence& seq, const std::string& bytes);
  void append_element(Sequence& seq, Element e);
  void append_ws(Sequence& seq);     // nothing unless any_whitespace
  void append_comma(Sequence& seq);  // ", " (or ws "," ws)
  void append_colon(Sequence& seq);  // ": " (or ws ":" ws)
  void append_open(Sequence& seq, const char* bracket);   // "{" / "[" (then ws)
  void append_close(Sequence& seq, const char* bracket);  // (ws then) "}" / "]"
  Element rule(const std::string& hint, std::vector<Sequence> alternatives);
  // e{min,max} with a long bounded range in O(sqrt(max - min)) rules instead of max - min (maxLength: 10000).
  Element repeat(const Element& e, int64_t min, int64_t max);
  Element element_of(Sequence seq);  // a sequence of one element is that element, else a rule

  Grammar grammar;
  const JsonSchemaOptions options;

 private:
  Element ref_value(const std::string& ref, const std::string& ptr);
  Element enum_value(const Json& schema, const std::string& ptr);
  Element typed_value(const Json& schema, const std::string& ptr);
  Element type_value(const std::string& type, const Json& schema, const std::string& ptr);

  const Json& root_;
  int depth_ = 0;
  size_t nodes_ = 0;
  std::map<std::string, int32_t> ref_rules_;   // $ref target pointer -> its rule
  std::vector<std::string> direct_refs_;       // refs entered since the last text (a cycle here adds no text)
  std::optional<Element> any_value_, any_object_, json_char_, ws_;
  friend struct DepthGuard;
  friend struct ProgressScope;

 public:
  // Entering a subschema: bounds the nesting and the number of subschemas.
  struct DepthGuard {
    DepthGuard(SchemaCompiler& c, const std::string& ptr);
    ~DepthGuard() { --compiler.depth_; }
    SchemaCompiler& compiler;
  };
  // Text has been written (an object's or array's opening): refs entered before it are no longer a cycle.
  struct ProgressScope {
    explicit ProgressScope(SchemaCompiler& c) : compiler(c), saved(std::move(c.direct_refs_)) { c.direct_refs_.clear(); }
    ~ProgressScope() { compiler.direct_refs_ = std::move(saved); }
    SchemaCompiler& compiler;
    std::vector<std::string> saved;
  };
};

// Keyword classes.
bool is_annotation_keyword(const std::string& key);   // ignored: title, description, ...
bool is_unsupported_keyword(const std::string& key);  // refused: not, if, uniqueItems, ...

}  // namespace tide::grammar::detail

// JSON Schema compiled to tide's grammar IR: the grammar's language is a set of JSON texts, each valid
// against the schema, written in one layout the model can follow.
//
// Layout (default): compact with one space after each separator, as Python's json.dumps writes:
//   {"a": 1, "b": [1, 2], "c": {}}      -- ", " between members and items, ": " after keys, nothing inside
// brackets, no whitespace before or after the value. With JsonSchemaOptions::any_whitespace every place where
// JSON allows whitespace (except before and after the whole text) takes 0..max_whitespace of space, \t, \n, \r.
// Object members follow the schema's `properties` order (required ones present, optional ones may be left
// out), then any additional members. enum and const values are written in the same layout.
//
// Supported keywords:
//   type (one or a list), enum, const (values the type, length or bound keywords beside them exclude are left
//   out), anyOf, oneOf (as anyOf: exclusivity is not enforced), allOf (merged when
//   the members merge trivially, else refused), $ref to any local JSON pointer ("#", "#/$defs/x",
//   "#/definitions/x", ...; recursion allowed, a cycle that adds no text refused);
//   object: properties, required, additionalProperties (false, true or a schema; when absent: false where the
//     schema lists properties or required names, else true -- see JsonSchemaOptions), additional keys never
//     repeat a listed property's name;
//   array: items (a schema, false, or a list = prefixItems in drafts 4-7), prefixItems, additionalItems,
//     minItems, maxItems, uniqueItems: false;
//   string: any character but controls, every JSON escape (\" \\ \/ \b \f \n \r \t \uXXXX, no lone surrogate);
//     minLength, maxLength (code points; an escape counts one); pattern (ECMAScript via regex.h, search
//     semantics: a side without its anchor may have any text; the characters it matches written as JSON string
//     content); format: date, time, date-time (RFC 3339, "Z" or an offset), uuid, email, hostname, ipv4, ipv6
//     (the full eight-group form only), uri -- each a subset of what the format allows (json_schema_string.cpp).
//     Lengths beside a pattern or format only where the pattern implies them or is one repeated class;
//   integer / number: minimum, maximum, exclusiveMinimum, exclusiveMaximum (numbers or draft-4 booleans).
//   Integer and number ranges are exact over decimals written without an exponent (digit-range rules, also
//   for fractional bounds); a bounded number is written without an exponent. Unbounded numbers take JSON's
//   syntax with fraction and exponent (at most two exponent digits, so that every number fits a double);
//   integers never "-0". Bounds of more than 40 digits are refused.
// Without `type`, the type is inferred from the keywords present (properties -> object, items -> array,
// minLength/pattern/format -> string, minimum... -> number); a schema without any is any JSON value.
// Descriptive keywords (title, description, default, examples, $schema, $id, $comment, deprecated, readOnly,
// writeOnly, $defs, definitions, ...) and keywords unknown to JSON Schema are ignored.
// Refused with a GrammarError naming the keyword and its JSON pointer ("unsupported JSON Schema keyword
// 'uniqueItems' at /properties/tags"): not, if/then/else, patternProperties, propertyNames,
// dependentSchemas, dependentRequired, dependencies, uniqueItems: true, multipleOf, contains, minContains,
// maxContains, minProperties, maxProperties, unevaluatedProperties, unevaluatedItems, $dynamicRef,
// $recursiveRef, unknown formats, non-local $refs, and schemas that admit no value.
#pragma once

#include <cstddef>

#include <nlohmann/json.hpp>

#include "grammar/grammar.h"

namespace tide::grammar {

struct JsonSchemaOptions {
  // Whitespace where JSON allows it, at most max_whitespace characters at each place (bounded so that a
  // model cannot loop on whitespace forever).
  bool any_whitespace = false;
  int max_whitespace = 16;
  // When a schema lists properties but says nothing of additionalProperties (or lists prefixItems but says
  // nothing of items), extra members / items are left out. false: JSON Schema's default (extra ones allowed).
  bool strict = true;
  // Bounds against hostile schemas: the nesting of subschemas and $ref expansions, the number of subschemas
  // compiled, and the number of enum values.
  int max_depth = 128;
  size_t max_schema_nodes = 100'000;
  size_t max_enum_values = 100'000;
};

// The language of JSON texts valid against `schema`, in the layout above. Throws GrammarError for what the
// engine refuses. The result is validated.
Grammar compile_json_schema(const nlohmann::ordered_json& schema, const JsonSchemaOptions& options = {});

// Any JSON object (OpenAI's response_format json_object), in the same layout.
Grammar any_json(const JsonSchemaOptions& options = {});

}  // namespace tide::grammar

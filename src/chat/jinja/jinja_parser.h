// Jinja2 parser: tokens -> syntax tree, following jinja2's grammar (operator precedence, tuples without
// parentheses, filters and tests binding tighter than arithmetic, `if` expressions).
// Supported statements: if / elif / else, for (target unpacking, `if` filter, else), set (expression, block,
// namespace attribute), macro, call, filter, with, break, continue, generation (transformers' extension: its body
// is rendered as is). Unsupported (a syntax error naming the tag): include, import, extends, block, recursive
// loops, *args / **kwargs in calls.
#pragma once

#include <string_view>

#include "chat/jinja/jinja_ast.h"

namespace tide::jinja {

// Parses a normalized source (see normalize_source). Throws tide::Error "chat template syntax error at line L,
// column C: ..." on invalid input, and when nesting exceeds a fixed depth (hostile templates).
Body parse_template(std::string_view source);

}  // namespace tide::jinja

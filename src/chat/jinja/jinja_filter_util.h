// What the two filter files (jinja_filters.cpp: strings, values, numbers, JSON; jinja_sequence_filters.cpp)
// share. Internal to src/chat.
#pragma once

#include <string>
#include <string_view>

#include "chat/jinja/jinja_builtins.h"
#include "chat/jinja/jinja_value.h"

namespace tide::jinja {

// A string result, its size checked against the template's output limit and its length charged as work.
Value checked_string(Evaluator& evaluator, std::string text);

// The sequence filter `name` (length, join, sort, map, select, ...), or null.
FilterFn find_sequence_filter(std::string_view name);

}  // namespace tide::jinja

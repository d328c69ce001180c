// vLLM's `choice` structured output: the generated text is exactly one of a list of strings.
#pragma once

#include <string>
#include <vector>

#include "grammar/grammar.h"

namespace tide::grammar {

inline constexpr size_t kMaxChoices = 100000;
inline constexpr size_t kMaxChoiceBytes = 16 * 1024 * 1024;  // all choices together

// A grammar whose root matches exactly the given strings (byte for byte; the empty string is allowed).
// Refuses an empty list and lists beyond the bounds above.
Grammar compile_choice(const std::vector<std::string>& choices);

}  // namespace tide::grammar

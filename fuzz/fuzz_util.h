// What the fuzz targets share: the input refusals that are the expected outcome of most fuzzed inputs, and a
// check that turns a broken property into a finding.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace tide::fuzz {

// Runs `f`; returns true when it completed, false when it refused the input the documented way (tide::Error,
// or an nlohmann::json exception from parsing or a type mismatch). Any other exception escapes: libFuzzer
// then reports it (std::terminate) as a finding, as it does crashes and sanitizer reports.
template <typename F>
bool accepted(F&& f) {
  try {
    f();
    return true;
  } catch (const Error&) {
  } catch (const nlohmann::json::exception&) {
  }
  return false;
}

// The input as text.
inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Splits `text` at the first NUL byte: the part before it and the part after it (empty without a NUL). The
// targets that take two inputs read them this way; JSON and UTF-8 text never need a NUL of their own.
inline std::pair<std::string_view, std::string_view> split_at_nul(std::string_view text) {
  const size_t nul = text.find('\0');
  if (nul == std::string_view::npos) return {text, {}};
  return {text.substr(0, nul), text.substr(nul + 1)};
}

}  // namespace tide::fuzz

// A property of the parsed input that must hold; its failure is a finding (abort, with the message).
#define FUZZ_CHECK(cond)                                                                   \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::fprintf(stderr, "fuzz check failed: %s at %s:%d\n", #cond, __FILE__, __LINE__); \
      std::abort();                                                                        \
    }                                                                                      \
  } while (0)

// tide::Error: the one exception type the engine throws for bad input (files, flags, requests) and broken
// invariants. Messages name what is wrong (the field, tensor, file or flag) so the user can fix it.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace tide {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// The device (or host) has no memory for an allocation right now. Thrown by backends whose memory can run out
// while serving (the GPU's), so that the engine can run a smaller step instead of failing the requests.
class OutOfMemoryError : public Error {
 public:
  explicit OutOfMemoryError(const std::string& message) : Error(message) {}
};

// Throws tide::Error with a fmt-formatted message.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace tide

// Checks an internal invariant (not user input); failure means a bug in tide.
#define TIDE_CHECK(cond)                                                                            \
  do {                                                                                              \
    if (!(cond)) ::tide::fail("internal error: check '{}' failed at {}:{}", #cond, __FILE__, __LINE__); \
  } while (0)

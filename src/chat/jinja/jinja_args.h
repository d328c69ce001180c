// Binding a builtin's call arguments to its Python signature, and the argument conversions builtins share.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "chat/jinja/jinja_value.h"

namespace tide::jinja {

// The arguments of a call matched to parameter names: positional first, then keywords by name. Throws
// RuntimeError on too many positional arguments, an unknown keyword or one given twice.
class BoundArgs {
 public:
  BoundArgs(std::string_view function, const CallArgs& args, std::initializer_list<std::string_view> params);

  bool has(size_t index) const { return given_[index]; }
  // The argument, or `fallback` when it was not given (a copy: values share their contents).
  Value get(size_t index, Value fallback = Value()) const { return given_[index] ? values_[index] : fallback; }
  // Argument conversions; `fallback` when not given (or none, for the optional ones).
  int64_t get_int(size_t index, int64_t fallback) const;
  bool get_bool(size_t index, bool fallback) const;
  std::string get_string(size_t index, const std::string& fallback) const;
  std::optional<std::string> get_optional_string(size_t index) const;

 private:
  std::string function_;
  std::vector<std::string_view> names_;
  std::vector<Value> values_;
  std::vector<bool> given_;
};

}  // namespace tide::jinja

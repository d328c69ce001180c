// BoundArgs: a builtin's call arguments matched to its parameters (see jinja_args.h).
#include "chat/jinja/jinja_args.h"

#include <algorithm>

namespace tide::jinja {

BoundArgs::BoundArgs(std::string_view function, const CallArgs& args, std::initializer_list<std::string_view> params)
    : function_(function), names_(params), values_(params.size()), given_(params.size(), false) {
  if (args.positional.size() > params.size()) {
    runtime_error("{}() takes at most {} argument(s) ({} given)", function_, params.size(), args.positional.size());
  }
  for (size_t i = 0; i < args.positional.size(); ++i) {
    values_[i] = args.positional[i];
    given_[i] = true;
  }
  for (const auto& [key, value] : args.keyword) {
    const auto it = std::find(names_.begin(), names_.end(), key);
    if (it == names_.end()) runtime_error("{}() got an unexpected keyword argument '{}'", function_, key);
    const auto index = static_cast<size_t>(it - names_.begin());
    if (given_[index]) runtime_error("{}() got multiple values for argument '{}'", function_, key);
    values_[index] = value;
    given_[index] = true;
  }
}

int64_t BoundArgs::get_int(size_t index, int64_t fallback) const {
  if (!given_[index]) return fallback;
  const Value& value = values_[index];
  if (value.is_int()) return value.as_int();
  if (value.is_float()) return float_to_int(value.as_number());
  if (value.is_big_int()) runtime_error("{}(): argument '{}' is too large (64-bit integers only)", function_, names_[index]);
  runtime_error("{}(): argument '{}' must be an integer, not {}", function_, names_[index], value.type_name());
}

bool BoundArgs::get_bool(size_t index, bool fallback) const {
  return given_[index] ? values_[index].truthy() : fallback;
}

std::string BoundArgs::get_string(size_t index, const std::string& fallback) const {
  return given_[index] ? values_[index].str() : fallback;
}

std::optional<std::string> BoundArgs::get_optional_string(size_t index) const {
  if (!given_[index] || values_[index].is_none()) return std::nullopt;
  return values_[index].str();
}

}  // namespace tide::jinja

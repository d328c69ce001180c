// The builtins templates can reach: jinja2's filters and tests (and transformers' tojson), methods of str /
// dict / list values (x.strip(), d.items(), ...), and the globals range, dict, namespace, cycler, joiner,
// raise_exception and strftime_now. Mutating methods (list.append, dict.update, ...) are refused as jinja2's
// ImmutableSandboxedEnvironment refuses them: the attribute is an undefined whose call fails.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "chat/jinja/jinja_value.h"

namespace tide::jinja {

class Scope;

using FilterFn = Value (*)(Evaluator& evaluator, const Value& input, CallArgs& args);
using TestFn = bool (*)(Evaluator& evaluator, const Value& input, CallArgs& args);

// The filter / test `name`, or null.
FilterFn find_filter(std::string_view name);
TestFn find_test(std::string_view name);

// The attribute `name` of a str, dict or list that Python would find (a bound method), or nullopt.
std::optional<Value> builtin_attribute(const Value& object, const std::string& name);

// Defines the global functions in `scope`.
void add_builtin_globals(Scope& scope);

// A namespace() object, as {% set ns.x = ... %} assigns to.
class Namespace : public Object {
 public:
  std::string type_name() const override { return "Namespace"; }
  Value get_attr(std::string_view name) const override;
  void set_attr(const std::string& name, Value value) override;
  std::string repr() const override;
  void clear() override { attrs_ = Dict(); }

 private:
  Dict attrs_;
};

}  // namespace tide::jinja

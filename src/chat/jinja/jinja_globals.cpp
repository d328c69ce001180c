// The global functions templates may call (jinja2's range, dict, namespace, joiner; transformers'
// raise_exception and strftime_now) and the namespace object.
#include <ctime>

#include "chat/jinja/jinja_args.h"
#include "chat/jinja/jinja_builtins.h"
#include "chat/jinja/jinja_eval.h"

namespace tide::jinja {

namespace {

constexpr int64_t kMaxRange = 100000;  // jinja2's sandbox refuses longer ranges

Value global_range(Evaluator& evaluator, CallArgs& args) {
  if (!args.keyword.empty()) runtime_error("range() takes no keyword arguments");
  std::vector<int64_t> bounds;
  for (const Value& arg : args.positional) {
    if (!arg.is_int()) runtime_error("'{}' object cannot be interpreted as an integer", arg.type_name());
    bounds.push_back(arg.as_int());
  }
  if (bounds.empty() || bounds.size() > 3) runtime_error("range expected 1 to 3 arguments, got {}", bounds.size());
  const int64_t start = bounds.size() == 1 ? 0 : bounds[0];
  const int64_t stop = bounds.size() == 1 ? bounds[0] : bounds[1];
  const int64_t step = bounds.size() == 3 ? bounds[2] : 1;
  if (step == 0) runtime_error("range() arg 3 must not be zero");
  const long double span = step > 0 ? static_cast<long double>(stop) - start : static_cast<long double>(start) - stop;
  const long double count =
      span <= 0 ? 0 : (span + std::abs(static_cast<long double>(step)) - 1) / std::abs(static_cast<long double>(step));
  if (count > kMaxRange) {
    runtime_error("Range too big. The sandbox blocks ranges larger than MAX_RANGE ({}).", kMaxRange);
  }
  std::vector<Value> items;
  for (int64_t i = 0; i < static_cast<int64_t>(count); ++i) items.push_back(Value::integer(start + i * step));
  evaluator.charge(static_cast<int64_t>(items.size()));
  return Value::list(std::move(items));
}

// dict(mapping?, **kwargs) entries.
Dict dict_from_args(const char* name, const CallArgs& args) {
  Dict dict;
  if (args.positional.size() > 1) runtime_error("{} expected at most 1 argument, got {}", name, args.positional.size());
  if (!args.positional.empty()) {
    const Value& source = args.positional[0];
    if (!source.is_dict()) runtime_error("{}: the positional argument must be a mapping", name);
    for (const auto& [key, value] : source.as_dict().entries()) dict.set(key, value);
  }
  for (const auto& [key, value] : args.keyword) dict.set(Value::string(key), value);
  return dict;
}

Value global_dict(Evaluator&, CallArgs& args) { return Value::dict(dict_from_args("dict", args)); }

Value global_namespace(Evaluator& evaluator, CallArgs& args) {
  auto ns = std::make_shared<Namespace>();
  evaluator.adopt(ns);
  const Dict attrs = dict_from_args("namespace", args);
  for (const auto& [key, value] : attrs.entries()) ns->set_attr(key.str(), value);
  return Value::object(std::move(ns));
}

Value global_joiner(Evaluator&, CallArgs& args) {
  BoundArgs bound("joiner", args, {"sep"});
  auto used = std::make_shared<bool>(false);
  return Value::function("joiner", [used, sep = bound.get_string(0, ", ")](Evaluator&, CallArgs&) {
    if (!*used) {
      *used = true;
      return Value::string("");
    }
    return Value::string(sep);
  });
}

Value global_raise_exception(Evaluator&, CallArgs& args) {
  BoundArgs bound("raise_exception", args, {"message"});
  throw Error(bound.get(0).str());
}

Value global_strftime_now(Evaluator& evaluator, CallArgs& args) {
  BoundArgs bound("strftime_now", args, {"format"});
  const std::string format = bound.get(0).str();
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  evaluator.check_size(format.size() * 64);
  std::string out(format.size() * 64 + 64, '\0');
  const size_t written = std::strftime(out.data(), out.size(), format.c_str(), &local);
  out.resize(written);
  return Value::string(std::move(out));
}

}  // namespace

Value Namespace::get_attr(std::string_view name) const {
  if (const Value* value = attrs_.find(name)) return *value;
  return Value::undefined(fmt::format("'Namespace' object has no attribute '{}'", name));
}

void Namespace::set_attr(const std::string& name, Value value) { attrs_.set(Value::string(name), std::move(value)); }

std::string Namespace::repr() const {
  // Namespaces are the one way to build cycles (ns.x = [ns]) or unbounded nesting: cut both.
  thread_local int depth = 0;
  if (depth >= 16) return "<Namespace {...}>";
  struct Guard {
    Guard() { ++depth; }
    ~Guard() { --depth; }
  } guard;
  std::string out = "<Namespace {";
  bool first = true;
  for (const auto& [key, value] : attrs_.entries()) {
    out += (first ? "" : ", ") + key.repr() + ": " + value.repr();
    first = false;
  }
  return out + "}>";
}

void add_builtin_globals(Scope& scope) {
  scope.set("range", Value::function("range", global_range));
  scope.set("dict", Value::function("dict", global_dict));
  scope.set("namespace", Value::function("namespace", global_namespace));
  scope.set("joiner", Value::function("joiner", global_joiner));
  scope.set("raise_exception", Value::function("raise_exception", global_raise_exception));
  scope.set("strftime_now", Value::function("strftime_now", global_strftime_now));
}

}  // namespace tide::jinja

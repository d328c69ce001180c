// Evaluator (see jinja_eval.h): statements, expressions, scopes, macros and the loop variable.
#include "chat/jinja/jinja_eval.h"

#include <cmath>

#include "chat/jinja/jinja_builtins.h"
#include "chat/jinja/jinja_ops.h"

namespace tide::jinja {

namespace {

// The `loop` variable of a for loop; advanced in place between iterations, as jinja2's LoopContext is.
class LoopObject : public Object {
 public:
  explicit LoopObject(std::shared_ptr<const std::vector<Value>> items) : items_(std::move(items)) {}

  void set_index(size_t index) { index_ = index; }

  std::string type_name() const override { return "LoopContext"; }

  Value get_attr(std::string_view name) const override {
    const auto length = static_cast<int64_t>(items_->size());
    const auto index = static_cast<int64_t>(index_);
    if (name == "index") return Value::integer(index + 1);
    if (name == "index0") return Value::integer(index);
    if (name == "revindex") return Value::integer(length - index);
    if (name == "revindex0") return Value::integer(length - index - 1);
    if (name == "first") return Value::boolean(index == 0);
    if (name == "last") return Value::boolean(index == length - 1);
    if (name == "length") return Value::integer(length);
    if (name == "depth") return Value::integer(1);
    if (name == "depth0") return Value::integer(0);
    if (name == "previtem") return index > 0 ? (*items_)[index_ - 1] : Value::undefined("there is no previous item");
    if (name == "nextitem")
      return index + 1 < length ? (*items_)[index_ + 1] : Value::undefined("there is no next item");
    if (name == "cycle") return cycle_function();
    if (name == "changed") return changed_function();
    return Value::undefined(fmt::format("'LoopContext' object has no attribute '{}'", name));
  }

  std::string repr() const override { return fmt::format("<LoopContext {}/{}>", index_ + 1, items_->size()); }

 private:
  Value cycle_function() const {
    const size_t index = index_;
    return Value::function("loop.cycle", [index](Evaluator&, CallArgs& args) {
      if (args.positional.empty()) runtime_error("no items for cycling given");
      return args.positional[index % args.positional.size()];
    });
  }

  Value changed_function() const {
    auto last = last_changed_;
    return Value::function("loop.changed", [last](Evaluator&, CallArgs& args) {
      Value current = Value::list(args.positional, SequenceKind::kTuple);
      if (*last && equals(**last, current)) return Value::boolean(false);
      *last = std::move(current);
      return Value::boolean(true);
    });
  }

  std::shared_ptr<const std::vector<Value>> items_;
  size_t index_ = 0;
  std::shared_ptr<std::optional<Value>> last_changed_ = std::make_shared<std::optional<Value>>();
};

}  // namespace

// --- Scope ---

const Value* Scope::find(const std::string& name) const {
  for (const Scope* scope = this; scope != nullptr; scope = scope->parent_.get()) {
    const auto it = scope->vars_.find(name);
    if (it != scope->vars_.end()) return &it->second;
  }
  return nullptr;
}

void Scope::set(const std::string& name, Value value) { vars_[name] = std::move(value); }

// --- rendering ---

Evaluator::~Evaluator() {
  for (const auto& weak : closure_scopes_) {
    if (auto scope = weak.lock()) scope->clear();
  }
  for (const auto& weak : objects_) {
    if (auto object = weak.lock()) object->clear();
  }
}

std::string Evaluator::render(const Body& body, const Dict& variables) {
  auto builtins = std::make_shared<Scope>();
  add_builtin_globals(*builtins);
  auto globals = std::make_shared<Scope>(builtins);
  for (const auto& [key, value] : variables.entries()) globals->set(key.str(), value);
  auto top = std::make_shared<Scope>(globals);
  closure_scopes_.push_back(top);
  std::string out;
  out_ = &out;
  exec_body(body, top);
  out_ = nullptr;
  return out;
}

void Evaluator::charge(int64_t units) {
  work_ += units;
  if (work_ > limits_.max_work) {
    runtime_error("the template did more work than the limit ({} steps); it may loop without end", limits_.max_work);
  }
}

void Evaluator::check_size(size_t bytes) const {
  if (bytes > limits_.max_output_bytes) {
    runtime_error("the template built text longer than the limit ({} bytes)", limits_.max_output_bytes);
  }
}

void Evaluator::append_output(std::string_view text) {
  check_size(out_->size() + text.size());
  charge(static_cast<int64_t>(text.size()) / 64);
  out_->append(text);
}

std::string Evaluator::capture(const Body& body, const ScopePtr& scope) {
  std::string buffer;
  std::string* saved = out_;
  out_ = &buffer;
  try {
    exec_body(body, scope);
  } catch (...) {
    out_ = saved;
    throw;
  }
  out_ = saved;
  return buffer;
}

// --- statements ---

Evaluator::Flow Evaluator::exec_body(const Body& body, const ScopePtr& scope) {
  for (const Stmt& stmt : body) {
    const Flow flow = exec(stmt, scope);
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Evaluator::Flow Evaluator::exec(const Stmt& stmt, const ScopePtr& scope) {
  try {
    charge(1);
    return std::visit([&](const auto& node) { return exec_node(node, scope); }, stmt.node);
  } catch (const RuntimeError& error) {
    throw Error(fmt::format("chat template error at line {}: {}", stmt.line, error.what()));
  }
}

Evaluator::Flow Evaluator::exec_node(const TextStmt& stmt, const ScopePtr&) {
  append_output(stmt.text);
  return Flow::kNormal;
}

Evaluator::Flow Evaluator::exec_node(const OutputStmt& stmt, const ScopePtr& scope) {
  const Value value = eval(*stmt.expr, *scope);
  charge(value.weight());
  append_output(value.str());
  return Flow::kNormal;
}

Evaluator::Flow Evaluator::exec_node(const IfStmt& stmt, const ScopePtr& scope) {
  for (const auto& [condition, body] : stmt.branches) {
    if (eval(*condition, *scope).truthy()) return exec_body(body, scope);
  }
  return exec_body(stmt.else_body, scope);
}

std::vector<Value> Evaluator::loop_items(const ForStmt& stmt, const ScopePtr& scope) {
  const Value iterable = eval(*stmt.iterable, *scope);
  charge(iterable.weight());
  std::vector<Value> items = iterate(iterable);
  if (!stmt.condition) return items;
  std::vector<Value> kept;
  for (Value& item : items) {
    auto item_scope = std::make_shared<Scope>(scope);
    assign(*item_scope, stmt.target, item);
    if (eval(*stmt.condition, *item_scope).truthy()) kept.push_back(std::move(item));
  }
  return kept;
}

Evaluator::Flow Evaluator::exec_node(const ForStmt& stmt, const ScopePtr& scope) {
  auto items = std::make_shared<const std::vector<Value>>(loop_items(stmt, scope));
  if (items->empty()) {
    exec_body(stmt.else_body, std::make_shared<Scope>(scope));
    return Flow::kNormal;
  }
  auto loop = std::make_shared<LoopObject>(items);
  const Value loop_value = Value::object(loop);
  for (size_t i = 0; i < items->size(); ++i) {
    charge(1);
    loop->set_index(i);
    auto iteration = std::make_shared<Scope>(scope);
    iteration->set("loop", loop_value);
    assign(*iteration, stmt.target, (*items)[i]);
    if (exec_body(stmt.body, iteration) == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

void Evaluator::assign(Scope& scope, const Target& target, const Value& value) {
  if (!target.attribute.empty()) {
    const Value* object = scope.find(target.name);
    if (object == nullptr || !object->is_object()) runtime_error("cannot assign attribute on non-namespace object");
    object->as_object().set_attr(target.attribute, value);
    return;
  }
  if (!target.is_tuple) {
    scope.set(target.name, value);
    return;
  }
  const std::vector<Value> items = iterate(value);
  if (items.size() < target.items.size()) {
    runtime_error("not enough values to unpack (expected {}, got {})", target.items.size(), items.size());
  }
  if (items.size() > target.items.size()) {
    runtime_error("too many values to unpack (expected {})", target.items.size());
  }
  for (size_t i = 0; i < items.size(); ++i) assign(scope, target.items[i], items[i]);
}

Evaluator::Flow Evaluator::exec_node(const SetStmt& stmt, const ScopePtr& scope) {
  assign(*scope, stmt.target, eval(*stmt.value, *scope));
  return Flow::kNormal;
}

Evaluator::Flow Evaluator::exec_node(const SetBlockStmt& stmt, const ScopePtr& scope) {
  Value value = Value::string(capture(stmt.body, scope));
  if (stmt.filter) value = apply_filter_chain(*stmt.filter, std::move(value), *scope);
  assign(*scope, stmt.target, value);
  return Flow::kNormal;
}

Evaluator::Flow Evaluator::exec_node(const MacroStmt& stmt, const ScopePtr& scope) {
  scope->set(stmt.name, make_macro(stmt.name, stmt.params, stmt.body, &stmt, scope));
  return Flow::kNormal;
}

Evaluator::Flow Evaluator::exec_node(const CallBlockStmt& stmt, const ScopePtr& scope) {
  const auto& call = std::get<CallExpr>(stmt.call->node);
  const Value callee = eval(*call.callee, *scope);
  CallArgs args = eval_args(call.args, *scope);
  args.keyword.emplace_back("caller", make_macro("caller", stmt.params, stmt.body, nullptr, scope));
  append_output(this->call(callee, args).str());
  return Flow::kNormal;
}

Evaluator::Flow Evaluator::exec_node(const FilterBlockStmt& stmt, const ScopePtr& scope) {
  Value body = Value::string(capture(stmt.body, scope));
  append_output(apply_filter_chain(*stmt.filter, std::move(body), *scope).str());
  return Flow::kNormal;
}

Evaluator::Flow Evaluator::exec_node(const WithStmt& stmt, const ScopePtr& scope) {
  auto inner = std::make_shared<Scope>(scope);
  for (const auto& [target, value] : stmt.assignments) assign(*inner, target, eval(*value, *scope));
  return exec_body(stmt.body, inner);
}

// --- macros ---

Value Evaluator::make_macro(const std::string& name, const std::vector<MacroParam>& params, const Body& body,
                            const MacroStmt* flags, ScopePtr closure) {
  closure_scopes_.push_back(closure);
  return Value::function(name, [this, name, &params, &body, flags, closure](Evaluator&, CallArgs& args) {
    return call_macro(name, params, body, flags, closure, args);
  });
}

Value Evaluator::call_macro(const std::string& name, const std::vector<MacroParam>& params, const Body& body,
                            const MacroStmt* flags, const ScopePtr& closure, CallArgs& args) {
  if (call_depth_ >= limits_.max_call_depth) {
    runtime_error("macro calls nested deeper than the limit ({}); the template may recurse without end",
                  limits_.max_call_depth);
  }
  const bool uses_varargs = flags != nullptr && flags->uses_varargs;
  const bool uses_kwargs = flags != nullptr && flags->uses_kwargs;
  if (args.positional.size() > params.size() && !uses_varargs) {
    runtime_error("macro '{}' takes not more than {} argument(s)", name, params.size());
  }
  auto scope = std::make_shared<Scope>(closure);
  std::vector<bool> given(params.size(), false);
  for (size_t i = 0; i < params.size() && i < args.positional.size(); ++i) {
    scope->set(params[i].name, args.positional[i]);
    given[i] = true;
  }
  Dict extra_kwargs;
  for (auto& [key, value] : args.keyword) {
    size_t i = 0;
    while (i < params.size() && params[i].name != key) ++i;
    if (i < params.size()) {
      if (given[i]) runtime_error("macro '{}' got multiple values for argument '{}'", name, key);
      scope->set(key, value);
      given[i] = true;
    } else if (key == "caller") {
      scope->set("caller", value);
    } else if (uses_kwargs) {
      extra_kwargs.set(Value::string(key), value);
    } else {
      runtime_error("macro '{}' takes no keyword argument '{}'", name, key);
    }
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (given[i]) continue;
    scope->set(params[i].name, params[i].default_value
                                   ? eval(*params[i].default_value, *scope)
                                   : Value::undefined(fmt::format("parameter '{}' was not provided", params[i].name)));
  }
  if (uses_varargs) {
    std::vector<Value> rest;
    for (size_t i = params.size(); i < args.positional.size(); ++i) rest.push_back(args.positional[i]);
    scope->set("varargs", Value::list(std::move(rest), SequenceKind::kTuple));
  }
  if (uses_kwargs) scope->set("kwargs", Value::dict(std::move(extra_kwargs)));
  ++call_depth_;
  std::string text;
  try {
    text = capture(body, scope);
  } catch (...) {
    --call_depth_;
    throw;
  }
  --call_depth_;
  return Value::string(std::move(text));
}

Value Evaluator::call(const Value& callee, CallArgs& args) {
  if (callee.is_function()) {
    charge(1);
    return callee.as_function().body(*this, args);
  }
  if (callee.is_undefined()) undefined_error(callee);
  runtime_error("'{}' object is not callable", callee.type_name());
}

Value Evaluator::apply_filter(const std::string& name, const Value& input, CallArgs& args) {
  const FilterFn filter = find_filter(name);
  if (filter == nullptr) runtime_error("no filter named '{}'", name);
  charge(input.weight());
  return filter(*this, input, args);
}

bool Evaluator::apply_test(const std::string& name, const Value& input, CallArgs& args) {
  const TestFn test = find_test(name);
  if (test == nullptr) runtime_error("no test named '{}'", name);
  return test(*this, input, args);
}

// --- expressions ---

Value Evaluator::eval(const Expr& expr, Scope& scope) {
  charge(1);
  return std::visit([&](const auto& node) { return eval_node(node, scope); }, expr.node);
}

Value Evaluator::eval_node(const LiteralExpr& node, Scope&) { return node.value; }

Value Evaluator::eval_node(const NameExpr& node, Scope& scope) {
  if (const Value* value = scope.find(node.name)) return *value;
  return Value::undefined(fmt::format("'{}' is undefined", node.name));
}

Value Evaluator::eval_node(const ListExpr& node, Scope& scope) {
  std::vector<Value> items;
  items.reserve(node.items.size());
  for (const ExprPtr& item : node.items) items.push_back(eval(*item, scope));
  return Value::list(std::move(items), node.kind);
}

Value Evaluator::eval_node(const DictExpr& node, Scope& scope) {
  Dict dict;
  for (const auto& [key, value] : node.entries) {
    Value key_value = eval(*key, scope);
    dict.set(std::move(key_value), eval(*value, scope));
  }
  return Value::dict(std::move(dict));
}

Value Evaluator::eval_node(const UnaryExpr& node, Scope& scope) {
  return unary_op(node.op, eval(*node.operand, scope));
}

Value Evaluator::eval_node(const BinaryExpr& node, Scope& scope) {
  Value left = eval(*node.left, scope);
  if (node.op == BinaryOp::kAnd) return left.truthy() ? eval(*node.right, scope) : left;
  if (node.op == BinaryOp::kOr) return left.truthy() ? left : eval(*node.right, scope);
  const Value right = eval(*node.right, scope);
  return binary_op(*this, node.op, left, right);
}

Value Evaluator::eval_node(const CompareExpr& node, Scope& scope) {
  Value left = eval(*node.first, scope);
  for (const auto& [op, expr] : node.rest) {
    Value right = eval(*expr, scope);
    charge(left.weight() + right.weight());
    if (!compare_op(op, left, right)) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

Value Evaluator::eval_node(const AttributeExpr& node, Scope& scope) {
  return get_attribute(eval(*node.object, scope), node.name);
}

Value Evaluator::eval_node(const ItemExpr& node, Scope& scope) {
  const Value object = eval(*node.object, scope);
  const Value key = eval(*node.key, scope);
  if (object.is_string()) charge(object.weight());
  return get_item(object, key);
}

Value Evaluator::eval_node(const SliceExpr& node, Scope& scope) {
  const Value object = eval(*node.object, scope);
  const auto part = [&](const ExprPtr& expr) { return expr ? eval(*expr, scope) : Value::none(); };
  const Value start = part(node.start);
  const Value stop = part(node.stop);
  const Value step = part(node.step);
  charge(object.weight());
  return get_slice(object, start, stop, step);
}

CallArgs Evaluator::eval_args(const Arguments& args, Scope& scope) {
  CallArgs values;
  for (const ExprPtr& arg : args.positional) values.positional.push_back(eval(*arg, scope));
  for (const auto& [key, arg] : args.keyword) values.keyword.emplace_back(key, eval(*arg, scope));
  return values;
}

Value Evaluator::eval_node(const CallExpr& node, Scope& scope) {
  const Value callee = eval(*node.callee, scope);
  CallArgs args = eval_args(node.args, scope);
  return call(callee, args);
}

Value Evaluator::eval_node(const FilterExpr& node, Scope& scope) {
  const Value input = eval(*node.operand, scope);
  CallArgs args = eval_args(node.args, scope);
  return apply_filter(node.name, input, args);
}

Value Evaluator::apply_filter_chain(const Expr& chain, Value input, Scope& scope) {
  const auto& node = std::get<FilterExpr>(chain.node);
  Value operand = node.operand ? apply_filter_chain(*node.operand, std::move(input), scope) : std::move(input);
  CallArgs args = eval_args(node.args, scope);
  return apply_filter(node.name, operand, args);
}

Value Evaluator::eval_node(const TestExpr& node, Scope& scope) {
  const Value input = eval(*node.operand, scope);
  CallArgs args = eval_args(node.args, scope);
  return Value::boolean(apply_test(node.name, input, args));
}

Value Evaluator::eval_node(const ConditionalExpr& node, Scope& scope) {
  if (eval(*node.condition, scope).truthy()) return eval(*node.then_value, scope);
  if (node.else_value) return eval(*node.else_value, scope);
  return Value::undefined("the inline if expression evaluated to false and no else section was defined");
}

}  // namespace tide::jinja

// Evaluator: renders a parsed template (jinja_ast.h) with jinja2's runtime semantics: a new scope per for-loop
// iteration, macro and with block (if blocks share the enclosing one), macros closing over the scope they were
// defined in, Python values and operators (jinja_ops.h), the filters / tests / globals of jinja_builtins.h.
// Hostile templates are bounded by RenderLimits: output size, nested macro calls, and a work budget (every
// evaluated node and every 64 bytes copied counts) so nothing runs for long or exhausts memory or the stack.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "chat/jinja/jinja_ast.h"
#include "chat/jinja/jinja_value.h"

namespace tide::jinja {

struct RenderLimits {
  size_t max_output_bytes = size_t{32} << 20;  // also the longest string a template may build
  int max_call_depth = 64;                     // nested macro calls
  int64_t max_work = 200'000'000;              // evaluation steps + bytes copied / 64
};

// Variables visible to a part of the template; lookups fall back to the parent scope.
class Scope {
 public:
  explicit Scope(std::shared_ptr<Scope> parent = nullptr) : parent_(std::move(parent)) {}
  // The innermost variable `name`, or null.
  const Value* find(const std::string& name) const;
  // Sets `name` in this scope (shadowing any outer one).
  void set(const std::string& name, Value value);
  void clear() { vars_.clear(); }

 private:
  std::shared_ptr<Scope> parent_;
  std::unordered_map<std::string, Value> vars_;
};

class Evaluator {
 public:
  explicit Evaluator(RenderLimits limits) : limits_(limits) {}
  ~Evaluator();
  Evaluator(const Evaluator&) = delete;
  Evaluator& operator=(const Evaluator&) = delete;

  // Renders `body` with `variables` (shadowing the builtin globals). Throws tide::Error: the template's own
  // message for raise_exception, else "chat template error at line N: ...".
  std::string render(const Body& body, const Dict& variables);

  // --- services for the builtins ---

  // Calls a function or macro; throws RuntimeError for anything else (undefined: its undefined message).
  Value call(const Value& callee, CallArgs& args);
  // Applies the filter / test `name`; throws RuntimeError when there is none.
  Value apply_filter(const std::string& name, const Value& input, CallArgs& args);
  bool apply_test(const std::string& name, const Value& input, CallArgs& args);
  // Counts `units` of work; throws RuntimeError once the render's budget is spent.
  void charge(int64_t units);
  // Throws RuntimeError when a string of `bytes` would exceed the output limit.
  void check_size(size_t bytes) const;
  // Keeps track of a mutable object (a namespace) to clear after the render, breaking any reference cycle
  // the template built through it.
  void adopt(const std::shared_ptr<Object>& object) { objects_.push_back(object); }

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  using ScopePtr = std::shared_ptr<Scope>;

  // --- statements ---
  Flow exec_body(const Body& body, const ScopePtr& scope);
  Flow exec(const Stmt& stmt, const ScopePtr& scope);
  Flow exec_node(const TextStmt& stmt, const ScopePtr& scope);
  Flow exec_node(const OutputStmt& stmt, const ScopePtr& scope);
  Flow exec_node(const IfStmt& stmt, const ScopePtr& scope);
  Flow exec_node(const ForStmt& stmt, const ScopePtr& scope);
  Flow exec_node(const SetStmt& stmt, const ScopePtr& scope);
  Flow exec_node(const SetBlockStmt& stmt, const ScopePtr& scope);
  Flow exec_node(const MacroStmt& stmt, const ScopePtr& scope);
  Flow exec_node(const CallBlockStmt& stmt, const ScopePtr& scope);
  Flow exec_node(const FilterBlockStmt& stmt, const ScopePtr& scope);
  Flow exec_node(const WithStmt& stmt, const ScopePtr& scope);
  Flow exec_node(const BreakStmt&, const ScopePtr&) { return Flow::kBreak; }
  Flow exec_node(const ContinueStmt&, const ScopePtr&) { return Flow::kContinue; }

  void append_output(std::string_view text);
  // Renders `body` into a string of its own (macros, set and filter blocks).
  std::string capture(const Body& body, const ScopePtr& scope);
  void assign(Scope& scope, const Target& target, const Value& value);
  std::vector<Value> loop_items(const ForStmt& stmt, const ScopePtr& scope);
  // A callable running `params` / `body` in a scope under `closure` (macros and call-block callers).
  Value make_macro(const std::string& name, const std::vector<MacroParam>& params, const Body& body,
                   const MacroStmt* flags, ScopePtr closure);
  Value call_macro(const std::string& name, const std::vector<MacroParam>& params, const Body& body,
                   const MacroStmt* flags, const ScopePtr& closure, CallArgs& args);

  // --- expressions ---
  Value eval(const Expr& expr, Scope& scope);
  Value eval_node(const LiteralExpr& node, Scope& scope);
  Value eval_node(const NameExpr& node, Scope& scope);
  Value eval_node(const ListExpr& node, Scope& scope);
  Value eval_node(const DictExpr& node, Scope& scope);
  Value eval_node(const UnaryExpr& node, Scope& scope);
  Value eval_node(const BinaryExpr& node, Scope& scope);
  Value eval_node(const CompareExpr& node, Scope& scope);
  Value eval_node(const AttributeExpr& node, Scope& scope);
  Value eval_node(const ItemExpr& node, Scope& scope);
  Value eval_node(const SliceExpr& node, Scope& scope);
  Value eval_node(const CallExpr& node, Scope& scope);
  Value eval_node(const FilterExpr& node, Scope& scope);
  Value eval_node(const TestExpr& node, Scope& scope);
  Value eval_node(const ConditionalExpr& node, Scope& scope);
  CallArgs eval_args(const Arguments& args, Scope& scope);
  // A filter chain whose innermost operand is null, applied to `input` (filter and set blocks).
  Value apply_filter_chain(const Expr& chain, Value input, Scope& scope);

  RenderLimits limits_;
  int64_t work_ = 0;
  int call_depth_ = 0;
  std::string* out_ = nullptr;
  std::vector<std::weak_ptr<Scope>> closure_scopes_;  // cleared after rendering: macros and scopes form cycles
  std::vector<std::weak_ptr<Object>> objects_;
};

}  // namespace tide::jinja

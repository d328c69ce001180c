// The syntax tree of a parsed Jinja2 template: expressions (Expr) and statements (Stmt). Built by the parser,
// walked by the evaluator; immutable once parsed. Every node carries its source line for runtime errors.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "chat/jinja/jinja_value.h"

namespace tide::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;
struct Stmt;
using Body = std::vector<Stmt>;

struct Arguments {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
};

enum class UnaryOp : uint8_t { kNot, kNeg, kPos };
enum class BinaryOp : uint8_t { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow, kConcat, kAnd, kOr };
enum class CompareOp : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

// --- expressions ---

struct LiteralExpr {
  Value value;
};
struct NameExpr {
  std::string name;
};
struct ListExpr {  // [a, b] or (a, b)
  std::vector<ExprPtr> items;
  SequenceKind kind = SequenceKind::kList;
};
struct DictExpr {
  std::vector<std::pair<ExprPtr, ExprPtr>> entries;
};
struct UnaryExpr {
  UnaryOp op;
  ExprPtr operand;
};
struct BinaryExpr {
  BinaryOp op;
  ExprPtr left;
  ExprPtr right;
};
struct CompareExpr {  // a < b <= c: chained as in Python
  ExprPtr first;
  std::vector<std::pair<CompareOp, ExprPtr>> rest;
};
struct AttributeExpr {  // x.name
  ExprPtr object;
  std::string name;
};
struct ItemExpr {  // x[key]
  ExprPtr object;
  ExprPtr key;
};
struct SliceExpr {  // x[start:stop:step], each part optional (null)
  ExprPtr object;
  ExprPtr start;
  ExprPtr stop;
  ExprPtr step;
};
struct CallExpr {
  ExprPtr callee;
  Arguments args;
};
struct FilterExpr {  // operand | name(args); a null operand stands for a filter block's body
  ExprPtr operand;
  std::string name;
  Arguments args;
};
struct TestExpr {  // operand is name(args); "is not" wraps it in UnaryOp::kNot
  ExprPtr operand;
  std::string name;
  Arguments args;
};
struct ConditionalExpr {  // then_value if condition else else_value (else_value may be null: undefined)
  ExprPtr condition;
  ExprPtr then_value;
  ExprPtr else_value;
};

struct Expr {
  int line = 0;
  std::variant<LiteralExpr, NameExpr, ListExpr, DictExpr, UnaryExpr, BinaryExpr, CompareExpr, AttributeExpr, ItemExpr,
               SliceExpr, CallExpr, FilterExpr, TestExpr, ConditionalExpr>
      node;
};

// --- statements ---

// What a for / set / with assigns to: a name, a namespace attribute (ns.attr), or a tuple to unpack into.
struct Target {
  std::string name;
  std::string attribute;  // non-empty for ns.attr
  std::vector<Target> items;
  bool is_tuple = false;
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null when required
};

struct TextStmt {
  std::string text;
};
struct OutputStmt {  // {{ expr }}
  ExprPtr expr;
};
struct IfStmt {
  std::vector<std::pair<ExprPtr, Body>> branches;  // if, then each elif
  Body else_body;
};
struct ForStmt {
  Target target;
  ExprPtr iterable;
  ExprPtr condition;  // {% for x in xs if cond %}, may be null
  Body body;
  Body else_body;  // rendered when no item was iterated
};
struct SetStmt {
  Target target;
  ExprPtr value;
};
struct SetBlockStmt {  // {% set x | filters %}body{% endset %}
  Target target;
  ExprPtr filter;  // FilterExpr chain over the body, may be null
  Body body;
};
struct MacroStmt {
  std::string name;
  std::vector<MacroParam> params;
  Body body;
  bool uses_caller = false;
  bool uses_varargs = false;
  bool uses_kwargs = false;
};
struct CallBlockStmt {  // {% call(params) macro(args) %}body{% endcall %}
  std::vector<MacroParam> params;
  ExprPtr call;  // a CallExpr
  Body body;
};
struct FilterBlockStmt {  // {% filter chain %}body{% endfilter %}
  ExprPtr filter;
  Body body;
};
struct WithStmt {
  std::vector<std::pair<Target, ExprPtr>> assignments;
  Body body;
};
struct BreakStmt {};
struct ContinueStmt {};

struct Stmt {
  int line = 0;
  std::variant<TextStmt, OutputStmt, IfStmt, ForStmt, SetStmt, SetBlockStmt, MacroStmt, CallBlockStmt, FilterBlockStmt,
               WithStmt, BreakStmt, ContinueStmt>
      node;
};

}  // namespace tide::jinja

// The jinja2 parser's class (jinja_parser.h has the entry point): the token stream and nesting guards here,
// statements in jinja_parser.cpp, expressions in jinja_parser_expr.cpp. Internal to src/chat.
#pragma once

#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "chat/jinja/jinja_ast.h"
#include "chat/jinja/jinja_lexer.h"
#include "core/error.h"

namespace tide::jinja::parser_detail {

inline constexpr int kMaxNesting = 200;

class Parser {
 public:
  Parser(std::string_view source, std::vector<Token> tokens) : src_(source), tokens_(std::move(tokens)) {}

  Body parse() {
    Body body = parse_body({});
    if (current().type != TokenType::kEnd) fail_here(fmt::format("unexpected '{}'", current().text));
    return body;
  }

 private:
  // --- token stream ---

  const Token& current() const { return tokens_[pos_]; }
  const Token& peek(size_t ahead = 1) const { return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)]; }
  const Token& next() {
    const Token& token = tokens_[pos_];
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return token;
  }

  bool is_op(std::string_view op) const { return current().type == TokenType::kOperator && current().text == op; }
  bool is_name(std::string_view name) const { return current().type == TokenType::kName && current().text == name; }
  bool skip_op(std::string_view op) { return is_op(op) && (next(), true); }
  bool skip_name(std::string_view name) { return is_name(name) && (next(), true); }

  std::string describe(const Token& token) const {
    switch (token.type) {
      case TokenType::kEnd:
        return "end of template";
      case TokenType::kVariableEnd:
        return "end of print statement";
      case TokenType::kBlockEnd:
        return "end of statement block";
      case TokenType::kData:
        return "template data";
      case TokenType::kString:
        return "string";
      case TokenType::kInteger:
        return "integer";
      case TokenType::kFloat:
        return "float";
      default:
        return "'" + token.text + "'";
    }
  }

  [[noreturn]] void fail_here(const std::string& message) const { syntax_error(src_, current().offset, message); }

  void expect_op(std::string_view op) {
    if (!skip_op(op)) fail_here(fmt::format("expected '{}', got {}", op, describe(current())));
  }
  std::string expect_name() {
    if (current().type != TokenType::kName) fail_here(fmt::format("expected a name, got {}", describe(current())));
    return next().text;
  }
  void expect_block_end() {
    if (current().type != TokenType::kBlockEnd) {
      fail_here(fmt::format("expected end of statement block, got {}", describe(current())));
    }
    next();
  }

  class DepthGuard {
   public:
    explicit DepthGuard(Parser& parser) : parser_(parser) {
      if (++parser_.depth_ > kMaxNesting) parser_.fail_here(fmt::format("nesting deeper than {} levels", kMaxNesting));
    }
    ~DepthGuard() { --parser_.depth_; }

   private:
    Parser& parser_;
  };

  template <typename Node>
  ExprPtr make_expr(int line, Node node) {
    auto expr = std::make_unique<Expr>();
    expr->line = line;
    expr->node = std::move(node);
    return expr;
  }

  // --- statements (jinja_parser.cpp) ---

  // Statements up to a {% tag %} whose name is in `end_tags` (left unconsumed, positioned at the name) or the
  // end of the template.
  Body parse_body(const std::set<std::string_view>& end_tags);
  // Parses a statement after "{%" and appends it to `body`.
  void parse_statement(Body& body);
  // Consumes the end tag's name (the parser stands on it) and its "%}".
  std::string end_tag();
  IfStmt parse_if();
  ForStmt parse_for();
  Stmt parse_set(int line);
  MacroStmt parse_macro();
  std::vector<MacroParam> parse_macro_params();
  CallBlockStmt parse_call_block();
  FilterBlockStmt parse_filter_block();
  WithStmt parse_with();
  // transformers' {% generation %} marks assistant text for masks; rendering ignores it.
  void parse_generation(Body& body);
  // A name, ns.attr (with_namespace), or names separated by commas / in parentheses (a tuple).
  Target parse_target(bool with_namespace, const std::set<std::string_view>& end_names);
  Target parse_target_item(bool with_namespace);

  // --- expressions (jinja_parser_expr.cpp) ---

  // Comma-separated expressions: one without a comma is itself, else a tuple. `with_condexpr` allows
  // "a if b else c" (not in if / for headers); `end_names` end the tuple like the tag's end does.
  ExprPtr parse_tuple(bool with_condexpr, bool explicit_parentheses, const std::set<std::string_view>& end_names);
  ExprPtr parse_expression(bool with_condexpr);
  ExprPtr parse_conditional();
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr parse_name();
  ExprPtr parse_list();
  ExprPtr parse_dict();
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_filters_and_tests(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr node);
  // After "[": a key or a slice a:b:c (each part optional).
  ExprPtr parse_subscribed(ExprPtr object, int line);
  ExprPtr parse_call(ExprPtr callee);
  Arguments parse_call_args();
  // "| name(args)" repeated; `start_inline`: the first filter has no leading "|" ({% filter name %}).
  ExprPtr parse_filters(ExprPtr node, bool start_inline);
  ExprPtr parse_test(ExprPtr node);

  std::string_view src_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::vector<std::set<std::string>*> name_scopes_;  // names read inside the macros being parsed
};

}  // namespace tide::jinja::parser_detail

// Jinja2 parser (see jinja_parser.h): recursive descent with jinja2's precedence, lowest first:
// conditional, or, and, not, comparison (in, not in), + -, ~, * / // %, **, unary - +, then primary with
// postfix (.name, [key], [a:b:c], call) and filters / tests. This file: the statements; the expressions are
// in jinja_parser_expr.cpp, the class in jinja_parser_impl.h.
#include "chat/jinja/jinja_parser.h"

#include <set>

#include "chat/jinja/jinja_builtins.h"
#include "chat/jinja/jinja_parser_impl.h"

namespace tide::jinja {

namespace parser_detail {

Body Parser::parse_body(const std::set<std::string_view>& end_tags) {
  DepthGuard guard(*this);
  Body body;
  while (current().type != TokenType::kEnd) {
    const Token& token = current();
    if (token.type == TokenType::kData) {
      body.push_back(Stmt{token.line, TextStmt{token.text}});
      next();
    } else if (token.type == TokenType::kVariableBegin) {
      next();
      ExprPtr expr = parse_tuple(true, false, {});
      if (current().type != TokenType::kVariableEnd) {
        fail_here(fmt::format("expected end of print statement, got {}", describe(current())));
      }
      next();
      body.push_back(Stmt{token.line, OutputStmt{std::move(expr)}});
    } else if (token.type == TokenType::kBlockBegin) {
      if (peek().type == TokenType::kName && end_tags.count(peek().text)) {
        next();
        return body;
      }
      next();
      parse_statement(body);
    } else {
      fail_here(fmt::format("unexpected {}", describe(token)));
    }
  }
  if (!end_tags.empty()) {
    std::string expected;
    for (std::string_view tag : end_tags) expected += (expected.empty() ? "'" : " or '") + std::string(tag) + "'";
    fail_here("unexpected end of template, expected " + expected);
  }
  return body;
}

void Parser::parse_statement(Body& body) {
  if (current().type != TokenType::kName) fail_here("tag name expected");
  const int line = current().line;
  const std::string tag = next().text;
  if (tag == "if") return body.push_back(Stmt{line, parse_if()});
  if (tag == "for") return body.push_back(Stmt{line, parse_for()});
  if (tag == "set") return body.push_back(parse_set(line));
  if (tag == "macro") return body.push_back(Stmt{line, parse_macro()});
  if (tag == "call") return body.push_back(Stmt{line, parse_call_block()});
  if (tag == "filter") return body.push_back(Stmt{line, parse_filter_block()});
  if (tag == "with") return body.push_back(Stmt{line, parse_with()});
  if (tag == "generation") return parse_generation(body);
  if (tag == "break" || tag == "continue") {
    if (loop_depth_ == 0) syntax_error(src_, tokens_[pos_ - 1].offset, "'" + tag + "' outside of a loop");
    expect_block_end();
    if (tag == "break") return body.push_back(Stmt{line, BreakStmt{}});
    return body.push_back(Stmt{line, ContinueStmt{}});
  }
  static const std::set<std::string_view> unsupported = {"include", "import", "from", "extends", "block", "do"};
  if (unsupported.count(tag)) syntax_error(src_, tokens_[pos_ - 1].offset, "tag '" + tag + "' is not supported");
  syntax_error(src_, tokens_[pos_ - 1].offset, "unknown tag '" + tag + "'");
}

std::string Parser::end_tag() {
  std::string name = next().text;
  expect_block_end();
  return name;
}

IfStmt Parser::parse_if() {
  IfStmt stmt;
  while (true) {
    ExprPtr condition = parse_tuple(false, false, {});
    expect_block_end();
    Body body = parse_body({"elif", "else", "endif"});
    stmt.branches.emplace_back(std::move(condition), std::move(body));
    const std::string tag = next().text;
    if (tag == "elif") continue;
    if (tag == "else") {
      expect_block_end();
      stmt.else_body = parse_body({"endif"});
      end_tag();
    } else {
      expect_block_end();
    }
    return stmt;
  }
}

ForStmt Parser::parse_for() {
  ForStmt stmt;
  stmt.target = parse_target(false, {"in"});
  if (!skip_name("in")) fail_here(fmt::format("expected 'in', got {}", describe(current())));
  stmt.iterable = parse_tuple(false, false, {"recursive"});
  if (skip_name("if")) stmt.condition = parse_expression(true);
  if (is_name("recursive")) fail_here("recursive loops are not supported");
  expect_block_end();
  ++loop_depth_;
  stmt.body = parse_body({"endfor", "else"});
  --loop_depth_;
  if (end_tag() == "else") {
    stmt.else_body = parse_body({"endfor"});
    end_tag();
  }
  return stmt;
}

Stmt Parser::parse_set(int line) {
  Target target = parse_target(true, {});
  if (skip_op("=")) {
    ExprPtr value = parse_tuple(true, false, {});
    expect_block_end();
    return Stmt{line, SetStmt{std::move(target), std::move(value)}};
  }
  SetBlockStmt stmt;
  stmt.target = std::move(target);
  if (is_op("|")) stmt.filter = parse_filters(nullptr, false);
  expect_block_end();
  stmt.body = parse_body({"endset"});
  end_tag();
  return Stmt{line, std::move(stmt)};
}

MacroStmt Parser::parse_macro() {
  MacroStmt stmt;
  stmt.name = expect_name();
  stmt.params = parse_macro_params();
  expect_block_end();
  std::set<std::string> names;
  name_scopes_.push_back(&names);
  const int saved_loop_depth = loop_depth_;
  loop_depth_ = 0;
  stmt.body = parse_body({"endmacro"});
  loop_depth_ = saved_loop_depth;
  name_scopes_.pop_back();
  stmt.uses_caller = names.count("caller") > 0;
  stmt.uses_varargs = names.count("varargs") > 0;
  stmt.uses_kwargs = names.count("kwargs") > 0;
  if (!name_scopes_.empty()) name_scopes_.back()->insert(names.begin(), names.end());
  end_tag();
  return stmt;
}

std::vector<MacroParam> Parser::parse_macro_params() {
  std::vector<MacroParam> params;
  expect_op("(");
  while (!is_op(")")) {
    if (!params.empty()) expect_op(",");
    if (is_op(")")) break;
    MacroParam param;
    param.name = expect_name();
    if (skip_op("=")) {
      param.default_value = parse_expression(true);
    } else if (!params.empty() && params.back().default_value) {
      fail_here("non-default argument follows default argument");
    }
    params.push_back(std::move(param));
  }
  next();
  return params;
}

CallBlockStmt Parser::parse_call_block() {
  CallBlockStmt stmt;
  if (is_op("(")) stmt.params = parse_macro_params();
  stmt.call = parse_expression(true);
  if (!std::holds_alternative<CallExpr>(stmt.call->node)) fail_here("expected a call after 'call'");
  expect_block_end();
  std::set<std::string> names;
  name_scopes_.push_back(&names);
  stmt.body = parse_body({"endcall"});
  name_scopes_.pop_back();
  if (!name_scopes_.empty()) name_scopes_.back()->insert(names.begin(), names.end());
  end_tag();
  return stmt;
}

FilterBlockStmt Parser::parse_filter_block() {
  FilterBlockStmt stmt;
  stmt.filter = parse_filters(nullptr, true);
  expect_block_end();
  stmt.body = parse_body({"endfilter"});
  end_tag();
  return stmt;
}

WithStmt Parser::parse_with() {
  WithStmt stmt;
  while (current().type != TokenType::kBlockEnd) {
    if (!stmt.assignments.empty()) expect_op(",");
    Target target = parse_target(false, {});
    expect_op("=");
    stmt.assignments.emplace_back(std::move(target), parse_expression(true));
  }
  expect_block_end();
  stmt.body = parse_body({"endwith"});
  end_tag();
  return stmt;
}

void Parser::parse_generation(Body& body) {
  expect_block_end();
  Body inner = parse_body({"endgeneration"});
  end_tag();
  for (Stmt& stmt : inner) body.push_back(std::move(stmt));
}

Target Parser::parse_target(bool with_namespace, const std::set<std::string_view>& end_names) {
  Target target = parse_target_item(with_namespace);
  if (!target.attribute.empty() || !is_op(",")) return target;
  Target tuple;
  tuple.is_tuple = true;
  tuple.items.push_back(std::move(target));
  while (skip_op(",")) {
    if (current().type == TokenType::kBlockEnd || is_op("=") ||
        (current().type == TokenType::kName && end_names.count(current().text))) {
      break;
    }
    tuple.items.push_back(parse_target_item(false));
  }
  return tuple;
}

Target Parser::parse_target_item(bool with_namespace) {
  Target target;
  if (skip_op("(")) {
    target.is_tuple = true;
    while (!is_op(")")) {
      if (!target.items.empty()) expect_op(",");
      if (is_op(")")) break;
      target.items.push_back(parse_target_item(false));
    }
    next();
    return target;
  }
  target.name = expect_name();
  if (target.name == "true" || target.name == "false" || target.name == "none" || target.name == "True" ||
      target.name == "False" || target.name == "None") {
    syntax_error(src_, tokens_[pos_ - 1].offset, "cannot assign to '" + target.name + "'");
  }
  if (with_namespace && skip_op(".")) target.attribute = expect_name();
  return target;
}

}  // namespace parser_detail

Body parse_template(std::string_view source) { return parser_detail::Parser(source, tokenize(source)).parse(); }

}  // namespace tide::jinja

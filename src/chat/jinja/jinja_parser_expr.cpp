// Jinja2 parser, expressions: jinja2's precedence climbing from the conditional down to primaries with
// postfix operators, filters and tests (the class: jinja_parser_impl.h).
#include <set>

#include "chat/jinja/jinja_builtins.h"
#include "chat/jinja/jinja_parser_impl.h"

namespace tide::jinja::parser_detail {

ExprPtr Parser::parse_tuple(bool with_condexpr, bool explicit_parentheses, const std::set<std::string_view>& end_names) {
  const int line = current().line;
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  while (true) {
    if (!items.empty()) expect_op(",");
    const TokenType type = current().type;
    if (type == TokenType::kVariableEnd || type == TokenType::kBlockEnd || is_op(")") ||
        (type == TokenType::kName && end_names.count(current().text))) {
      break;
    }
    items.push_back(parse_expression(with_condexpr));
    if (!is_op(",")) break;
    is_tuple = true;
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items[0]);
    if (!explicit_parentheses) fail_here(fmt::format("expected an expression, got {}", describe(current())));
  }
  return make_expr(line, ListExpr{std::move(items), SequenceKind::kTuple});
}

ExprPtr Parser::parse_expression(bool with_condexpr) {
  DepthGuard guard(*this);
  return with_condexpr ? parse_conditional() : parse_or();
}

ExprPtr Parser::parse_conditional() {
  ExprPtr expr = parse_or();
  while (is_name("if")) {
    const int line = next().line;
    ExprPtr condition = parse_or();
    ExprPtr else_value = skip_name("else") ? parse_conditional() : nullptr;
    expr = make_expr(line, ConditionalExpr{std::move(condition), std::move(expr), std::move(else_value)});
  }
  return expr;
}

ExprPtr Parser::parse_or() {
  ExprPtr left = parse_and();
  while (is_name("or")) {
    const int line = next().line;
    left = make_expr(line, BinaryExpr{BinaryOp::kOr, std::move(left), parse_and()});
  }
  return left;
}

ExprPtr Parser::parse_and() {
  ExprPtr left = parse_not();
  while (is_name("and")) {
    const int line = next().line;
    left = make_expr(line, BinaryExpr{BinaryOp::kAnd, std::move(left), parse_not()});
  }
  return left;
}

ExprPtr Parser::parse_not() {
  if (is_name("not")) {
    DepthGuard guard(*this);
    const int line = next().line;
    return make_expr(line, UnaryExpr{UnaryOp::kNot, parse_not()});
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
  const int line = current().line;
  ExprPtr first = parse_math1();
  std::vector<std::pair<CompareOp, ExprPtr>> rest;
  while (true) {
    CompareOp op;
    if (skip_op("==")) {
      op = CompareOp::kEq;
    } else if (skip_op("!=")) {
      op = CompareOp::kNe;
    } else if (skip_op("<")) {
      op = CompareOp::kLt;
    } else if (skip_op("<=")) {
      op = CompareOp::kLe;
    } else if (skip_op(">")) {
      op = CompareOp::kGt;
    } else if (skip_op(">=")) {
      op = CompareOp::kGe;
    } else if (skip_name("in")) {
      op = CompareOp::kIn;
    } else if (is_name("not") && peek().type == TokenType::kName && peek().text == "in") {
      next();
      next();
      op = CompareOp::kNotIn;
    } else {
      break;
    }
    rest.emplace_back(op, parse_math1());
  }
  if (rest.empty()) return first;
  return make_expr(line, CompareExpr{std::move(first), std::move(rest)});
}

ExprPtr Parser::parse_math1() {
  ExprPtr left = parse_concat();
  while (is_op("+") || is_op("-")) {
    const Token& token = next();
    const BinaryOp op = token.text == "+" ? BinaryOp::kAdd : BinaryOp::kSub;
    left = make_expr(token.line, BinaryExpr{op, std::move(left), parse_concat()});
  }
  return left;
}

ExprPtr Parser::parse_concat() {
  ExprPtr left = parse_math2();
  while (is_op("~")) {
    const int line = next().line;
    left = make_expr(line, BinaryExpr{BinaryOp::kConcat, std::move(left), parse_math2()});
  }
  return left;
}

ExprPtr Parser::parse_math2() {
  ExprPtr left = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    const Token& token = next();
    const BinaryOp op = token.text == "*"    ? BinaryOp::kMul
                        : token.text == "/"  ? BinaryOp::kDiv
                        : token.text == "//" ? BinaryOp::kFloorDiv
                                             : BinaryOp::kMod;
    left = make_expr(token.line, BinaryExpr{op, std::move(left), parse_pow()});
  }
  return left;
}

ExprPtr Parser::parse_pow() {
  ExprPtr left = parse_unary(true);
  while (is_op("**")) {
    const int line = next().line;
    left = make_expr(line, BinaryExpr{BinaryOp::kPow, std::move(left), parse_unary(true)});
  }
  return left;
}

ExprPtr Parser::parse_unary(bool with_filter) {
  DepthGuard guard(*this);
  ExprPtr node;
  if (is_op("-") || is_op("+")) {
    const Token& token = next();
    const UnaryOp op = token.text == "-" ? UnaryOp::kNeg : UnaryOp::kPos;
    node = make_expr(token.line, UnaryExpr{op, parse_unary(false)});
  } else {
    node = parse_primary();
  }
  node = parse_postfix(std::move(node));
  return with_filter ? parse_filters_and_tests(std::move(node)) : std::move(node);
}

ExprPtr Parser::parse_primary() {
  const Token& token = current();
  switch (token.type) {
    case TokenType::kName:
      return parse_name();
    case TokenType::kString: {
      std::string text;
      while (current().type == TokenType::kString) text += next().text;
      return make_expr(token.line, LiteralExpr{Value::string(std::move(text))});
    }
    case TokenType::kInteger:
      next();
      return make_expr(token.line, LiteralExpr{Value::integer(token.int_value)});
    case TokenType::kFloat:
      next();
      return make_expr(token.line, LiteralExpr{Value::real(token.float_value)});
    default:
      break;
  }
  if (skip_op("(")) {
    ExprPtr expr = parse_tuple(true, true, {});
    expect_op(")");
    return expr;
  }
  if (is_op("[")) return parse_list();
  if (is_op("{")) return parse_dict();
  fail_here(fmt::format("unexpected {}", describe(token)));
}

ExprPtr Parser::parse_name() {
  const Token& token = next();
  const std::string& name = token.text;
  if (name == "true" || name == "True") return make_expr(token.line, LiteralExpr{Value::boolean(true)});
  if (name == "false" || name == "False") return make_expr(token.line, LiteralExpr{Value::boolean(false)});
  if (name == "none" || name == "None") return make_expr(token.line, LiteralExpr{Value::none()});
  for (std::set<std::string>* names : name_scopes_) names->insert(name);
  return make_expr(token.line, NameExpr{name});
}

ExprPtr Parser::parse_list() {
  const int line = next().line;
  std::vector<ExprPtr> items;
  while (!is_op("]")) {
    if (!items.empty()) expect_op(",");
    if (is_op("]")) break;
    items.push_back(parse_expression(true));
  }
  next();
  return make_expr(line, ListExpr{std::move(items), SequenceKind::kList});
}

ExprPtr Parser::parse_dict() {
  const int line = next().line;
  std::vector<std::pair<ExprPtr, ExprPtr>> entries;
  while (!is_op("}")) {
    if (!entries.empty()) expect_op(",");
    if (is_op("}")) break;
    ExprPtr key = parse_expression(true);
    expect_op(":");
    entries.emplace_back(std::move(key), parse_expression(true));
  }
  next();
  return make_expr(line, DictExpr{std::move(entries)});
}

ExprPtr Parser::parse_postfix(ExprPtr node) {
  while (true) {
    if (is_op(".") || is_op("[")) {
      node = parse_subscript(std::move(node));
    } else if (is_op("(")) {
      node = parse_call(std::move(node));
    } else {
      return node;
    }
  }
}

ExprPtr Parser::parse_filters_and_tests(ExprPtr node) {
  while (true) {
    if (is_op("|")) {
      node = parse_filters(std::move(node), false);
    } else if (is_name("is")) {
      node = parse_test(std::move(node));
    } else if (is_op("(")) {
      node = parse_call(std::move(node));
    } else {
      return node;
    }
  }
}

ExprPtr Parser::parse_subscript(ExprPtr node) {
  const Token& token = next();
  if (token.text == ".") {
    const Token& attr = current();
    if (attr.type == TokenType::kName) {
      next();
      return make_expr(token.line, AttributeExpr{std::move(node), attr.text});
    }
    if (attr.type == TokenType::kInteger) {
      next();
      return make_expr(token.line,
                       ItemExpr{std::move(node), make_expr(attr.line, LiteralExpr{Value::integer(attr.int_value)})});
    }
    fail_here("expected a name or number after '.'");
  }
  ExprPtr result = parse_subscribed(std::move(node), token.line);
  expect_op("]");
  return result;
}

ExprPtr Parser::parse_subscribed(ExprPtr object, int line) {
  ExprPtr start;
  if (!is_op(":")) {
    start = parse_expression(true);
    if (!is_op(":")) {
      if (is_op(",")) fail_here("tuple subscripts are not supported");
      return make_expr(line, ItemExpr{std::move(object), std::move(start)});
    }
  }
  next();  // ':'
  ExprPtr stop = is_op("]") || is_op(":") ? nullptr : parse_expression(true);
  ExprPtr step;
  if (skip_op(":") && !is_op("]")) step = parse_expression(true);
  return make_expr(line, SliceExpr{std::move(object), std::move(start), std::move(stop), std::move(step)});
}

ExprPtr Parser::parse_call(ExprPtr callee) {
  const int line = current().line;
  Arguments args = parse_call_args();
  return make_expr(line, CallExpr{std::move(callee), std::move(args)});
}

Arguments Parser::parse_call_args() {
  Arguments args;
  expect_op("(");
  bool first = true;
  while (!is_op(")")) {
    if (!first) expect_op(",");
    first = false;
    if (is_op(")")) break;
    if (is_op("*") || is_op("**")) fail_here("*args and **kwargs in calls are not supported");
    if (current().type == TokenType::kName && peek().type == TokenType::kOperator && peek().text == "=") {
      std::string key = next().text;
      next();
      args.keyword.emplace_back(std::move(key), parse_expression(true));
    } else {
      if (!args.keyword.empty()) fail_here("positional argument follows keyword argument");
      args.positional.push_back(parse_expression(true));
    }
  }
  next();
  return args;
}

ExprPtr Parser::parse_filters(ExprPtr node, bool start_inline) {
  while (is_op("|") || start_inline) {
    if (!start_inline) next();
    start_inline = false;
    const Token& name_token = current();
    std::string name = expect_name();
    while (skip_op(".")) name.append(".").append(expect_name());
    // Like jinja2, an unknown filter is an error of the template, whether or not it runs.
    if (find_filter(name) == nullptr) syntax_error(src_, name_token.offset, "no filter named '" + name + "'");
    Arguments args;
    if (is_op("(")) args = parse_call_args();
    node = make_expr(name_token.line, FilterExpr{std::move(node), std::move(name), std::move(args)});
  }
  return node;
}

ExprPtr Parser::parse_test(ExprPtr node) {
  const int line = next().line;  // "is"
  const bool negated = skip_name("not");
  const size_t name_offset = current().offset;
  std::string name = expect_name();
  while (skip_op(".")) name.append(".").append(expect_name());
  if (find_test(name) == nullptr) syntax_error(src_, name_offset, "no test named '" + name + "'");
  Arguments args;
  const TokenType type = current().type;
  if (is_op("(")) {
    args = parse_call_args();
  } else if ((type == TokenType::kName || type == TokenType::kString || type == TokenType::kInteger ||
              type == TokenType::kFloat || is_op("[") || is_op("{")) &&
             !is_name("else") && !is_name("or") && !is_name("and")) {
    if (is_name("is")) fail_here("cannot chain multiple tests with 'is'");
    args.positional.push_back(parse_postfix(parse_primary()));
  }
  ExprPtr test = make_expr(line, TestExpr{std::move(node), std::move(name), std::move(args)});
  if (negated) test = make_expr(line, UnaryExpr{UnaryOp::kNot, std::move(test)});
  return test;
}

}  // namespace tide::jinja::parser_detail

// Jinja2 parser (see jinja_parser.h): recursive descent with jinja2's precedence, lowest first:
// conditional, or, and, not, comparison (in, not in), + -, ~, * / // %, **, unary - +, then primary with
// postfix (.name, [key], [a:b:c], call) and filters / tests.
#include "chat/jinja_parser.h"

#include <set>

#include "chat/jinja_builtins.h"
#include "chat/jinja_lexer.h"
#include "core/error.h"

namespace tide::jinja {

namespace {

constexpr int kMaxNesting = 200;

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

  // --- statements ---

  // Statements up to a {% tag %} whose name is in `end_tags` (left unconsumed, positioned at the name) or the
  // end of the template.
  Body parse_body(const std::set<std::string_view>& end_tags) {
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

  // Parses a statement after "{%" and appends it to `body`.
  void parse_statement(Body& body) {
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

  // Consumes the end tag's name (the parser stands on it) and its "%}".
  std::string end_tag() {
    std::string name = next().text;
    expect_block_end();
    return name;
  }

  IfStmt parse_if() {
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

  ForStmt parse_for() {
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

  Stmt parse_set(int line) {
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

  MacroStmt parse_macro() {
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

  std::vector<MacroParam> parse_macro_params() {
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

  CallBlockStmt parse_call_block() {
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

  FilterBlockStmt parse_filter_block() {
    FilterBlockStmt stmt;
    stmt.filter = parse_filters(nullptr, true);
    expect_block_end();
    stmt.body = parse_body({"endfilter"});
    end_tag();
    return stmt;
  }

  WithStmt parse_with() {
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

  // transformers' {% generation %} marks assistant text for masks; rendering ignores it.
  void parse_generation(Body& body) {
    expect_block_end();
    Body inner = parse_body({"endgeneration"});
    end_tag();
    for (Stmt& stmt : inner) body.push_back(std::move(stmt));
  }

  // A name, ns.attr (with_namespace), or names separated by commas / in parentheses (a tuple).
  Target parse_target(bool with_namespace, const std::set<std::string_view>& end_names) {
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

  Target parse_target_item(bool with_namespace) {
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

  // --- expressions ---

  // Comma-separated expressions: one without a comma is itself, else a tuple. `with_condexpr` allows
  // "a if b else c" (not in if / for headers); `end_names` end the tuple like the tag's end does.
  ExprPtr parse_tuple(bool with_condexpr, bool explicit_parentheses, const std::set<std::string_view>& end_names) {
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

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard guard(*this);
    return with_condexpr ? parse_conditional() : parse_or();
  }

  ExprPtr parse_conditional() {
    ExprPtr expr = parse_or();
    while (is_name("if")) {
      const int line = next().line;
      ExprPtr condition = parse_or();
      ExprPtr else_value = skip_name("else") ? parse_conditional() : nullptr;
      expr = make_expr(line, ConditionalExpr{std::move(condition), std::move(expr), std::move(else_value)});
    }
    return expr;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      const int line = next().line;
      left = make_expr(line, BinaryExpr{BinaryOp::kOr, std::move(left), parse_and()});
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      const int line = next().line;
      left = make_expr(line, BinaryExpr{BinaryOp::kAnd, std::move(left), parse_not()});
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this);
      const int line = next().line;
      return make_expr(line, UnaryExpr{UnaryOp::kNot, parse_not()});
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
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

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& token = next();
      const BinaryOp op = token.text == "+" ? BinaryOp::kAdd : BinaryOp::kSub;
      left = make_expr(token.line, BinaryExpr{op, std::move(left), parse_concat()});
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (is_op("~")) {
      const int line = next().line;
      left = make_expr(line, BinaryExpr{BinaryOp::kConcat, std::move(left), parse_math2()});
    }
    return left;
  }

  ExprPtr parse_math2() {
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

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      const int line = next().line;
      left = make_expr(line, BinaryExpr{BinaryOp::kPow, std::move(left), parse_unary(true)});
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
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

  ExprPtr parse_primary() {
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

  ExprPtr parse_name() {
    const Token& token = next();
    const std::string& name = token.text;
    if (name == "true" || name == "True") return make_expr(token.line, LiteralExpr{Value::boolean(true)});
    if (name == "false" || name == "False") return make_expr(token.line, LiteralExpr{Value::boolean(false)});
    if (name == "none" || name == "None") return make_expr(token.line, LiteralExpr{Value::none()});
    for (std::set<std::string>* names : name_scopes_) names->insert(name);
    return make_expr(token.line, NameExpr{name});
  }

  ExprPtr parse_list() {
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

  ExprPtr parse_dict() {
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

  ExprPtr parse_postfix(ExprPtr node) {
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

  ExprPtr parse_filters_and_tests(ExprPtr node) {
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

  ExprPtr parse_subscript(ExprPtr node) {
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

  // After "[": a key or a slice a:b:c (each part optional).
  ExprPtr parse_subscribed(ExprPtr object, int line) {
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

  ExprPtr parse_call(ExprPtr callee) {
    const int line = current().line;
    Arguments args = parse_call_args();
    return make_expr(line, CallExpr{std::move(callee), std::move(args)});
  }

  Arguments parse_call_args() {
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

  // "| name(args)" repeated; `start_inline`: the first filter has no leading "|" ({% filter name %}).
  ExprPtr parse_filters(ExprPtr node, bool start_inline) {
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

  ExprPtr parse_test(ExprPtr node) {
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

  std::string_view src_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::vector<std::set<std::string>*> name_scopes_;  // names read inside the macros being parsed
};

}  // namespace

Body parse_template(std::string_view source) { return Parser(source, tokenize(source)).parse(); }

}  // namespace tide::jinja

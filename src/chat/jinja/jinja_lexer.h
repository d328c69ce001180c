// Jinja2 lexer with the whitespace rules transformers' environment uses: trim_blocks (the first newline after a
// block or comment tag is dropped), lstrip_blocks (spaces and tabs from the start of a line up to a block or
// comment tag are dropped), `-` / `+` markers on tags, comments, {% raw %} blocks, and newline normalization
// (\r\n and \r become \n, one trailing newline of the source is dropped: keep_trailing_newline off).
// Non-goals: line statements, custom delimiters.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tide::jinja {

enum class TokenType : uint8_t {
  kData,           // template text outside tags
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,
  kString,  // text holds the unescaped value
  kInteger,
  kFloat,
  kOperator,
  kEnd,  // end of the template
};

struct Token {
  TokenType type = TokenType::kEnd;
  std::string text;  // data, name, operator or string value
  int64_t int_value = 0;
  double float_value = 0;
  size_t offset = 0;  // byte offset in the normalized source
  int line = 1;
};

// The source as jinja2 lexes it: \r\n and \r replaced by \n, one trailing newline dropped.
std::string normalize_source(std::string_view source);

// Tokens of a normalized source, ending with kEnd. Throws tide::Error naming line and column on a lexical error
// (unterminated string or comment, unexpected character, unbalanced brackets).
std::vector<Token> tokenize(std::string_view source);

// "line L, column C" of a byte offset (column counted in code points from 1).
std::string describe_position(std::string_view source, size_t offset);

// Throws tide::Error "chat template syntax error at line L, column C: <message>".
[[noreturn]] void syntax_error(std::string_view source, size_t offset, const std::string& message);

}  // namespace tide::jinja

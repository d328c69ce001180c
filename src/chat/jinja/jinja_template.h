// jinja::Template: a parsed Jinja2 template, rendered as many times as needed (concurrently too: rendering does
// not modify it). This is the entry point of tide's Jinja2-subset interpreter; ChatTemplate builds on it.
#pragma once

#include <string>
#include <string_view>

#include "chat/jinja/jinja_ast.h"
#include "chat/jinja/jinja_eval.h"
#include "chat/jinja/jinja_value.h"

namespace tide::jinja {

class Template {
 public:
  // Parses `source` (newlines normalized, one trailing newline dropped, as jinja2 does). Throws tide::Error
  // "chat template syntax error at line L, column C: ...".
  explicit Template(std::string_view source);

  // Renders with `variables` (name -> value; they shadow the builtin globals). Throws tide::Error: the
  // template's own message for raise_exception(msg), else "chat template error at line N: ...".
  std::string render(const Dict& variables, const RenderLimits& limits = {}) const;

 private:
  std::string source_;
  Body body_;
};

}  // namespace tide::jinja

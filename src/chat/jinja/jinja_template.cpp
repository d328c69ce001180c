// jinja::Template (see jinja_template.h).
#include "chat/jinja/jinja_template.h"

#include "chat/jinja/jinja_lexer.h"
#include "chat/jinja/jinja_parser.h"

namespace tide::jinja {

Template::Template(std::string_view source) : source_(normalize_source(source)), body_(parse_template(source_)) {}

std::string Template::render(const Dict& variables, const RenderLimits& limits) const {
  Evaluator evaluator(limits);
  return evaluator.render(body_, variables);
}

}  // namespace tide::jinja

// compile_choice: one literal alternative per distinct choice, in the order given.
#include "grammar/choice.h"

#include <fmt/format.h>

#include <set>

namespace tide::grammar {

Grammar compile_choice(const std::vector<std::string>& choices) {
  if (choices.empty()) throw GrammarError("choice: the list of choices is empty");
  if (choices.size() > kMaxChoices) {
    throw GrammarError(fmt::format("choice: more than {} choices", kMaxChoices));
  }
  size_t total = 0;
  for (const std::string& choice : choices) total += choice.size();
  if (total > kMaxChoiceBytes) throw GrammarError(fmt::format("choice: the choices exceed {} bytes", kMaxChoiceBytes));
  Grammar grammar;
  grammar.root = grammar.add_rule("root");
  std::set<std::string> seen;  // a repeated choice adds nothing to the language
  for (const std::string& choice : choices) {
    if (!seen.insert(choice).second) continue;
    Sequence seq;
    if (!choice.empty()) seq.push_back(Grammar::literal(choice));
    grammar.add_alternative(grammar.root, std::move(seq));
  }
  grammar.validate();
  return grammar;
}

}  // namespace tide::grammar

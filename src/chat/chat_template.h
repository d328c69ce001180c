// ChatTemplate: turns a conversation (OpenAI-style messages) into the prompt text a checkpoint expects, by
// rendering its Jinja2 chat_template the way transformers' apply_chat_template does (same variables, same
// whitespace handling: trim_blocks and lstrip_blocks on, keep_trailing_newline off). The template language is
// tide's own Jinja2-subset interpreter (src/chat/jinja*), since no C++ Jinja engine is packaged.
// ChatTemplates: every template of a model folder by name (Cohere ships "default", "tool_use" and "rag"), and
// the one a request gets.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace tide {

// What a template sees besides the special tokens. Everything reaches the template as given: messages are not
// rewritten (content given as a list of parts stays a list, a missing key is undefined, null is none), and
// integers beyond 64 bits (big integers of json_exact.h) print with all their digits.
struct ChatTemplateInputs {
  // Ordered: objects keep the client's key order, as transformers' templates see them (tojson of tools).
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // [{"role", "content", ...}] as sent
  bool add_generation_prompt = true;
  nlohmann::ordered_json tools;      // null, or the request's tools array
  nlohmann::ordered_json documents;  // null, or documents for retrieval-augmented generation
  // More variables (chat_template_kwargs); they do not override the above.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
};

// One compiled template. Copies share it (it is immutable; rendering is thread-safe).
class ChatTemplate {
 public:
  // Parses `source`. `special_tokens`: variables such as {"bos_token": "<BOS_TOKEN>", "eos_token": ...}.
  // Throws tide::Error naming the line and column of a syntax error.
  ChatTemplate(std::string source, nlohmann::json special_tokens);

  // One template of a model folder: ChatTemplates::from_model_dir(dir, override_file), then the template
  // `name` when given (tide::Error when the folder has none of that name), else the one a request without
  // tools or documents gets. nullopt when the folder has no template.
  static std::optional<ChatTemplate> from_model_dir(const std::filesystem::path& dir,
                                                    const std::optional<std::filesystem::path>& override_file = {},
                                                    const std::optional<std::string>& name = {});

  // Renders the template. Throws tide::Error with the template's message on raise_exception(...) and with a
  // clear message on a runtime error (undefined filter, wrong types, ...). Never crashes and never runs
  // forever on hostile input (bounded recursion and output size).
  std::string render(const ChatTemplateInputs& inputs) const;

  const std::string& source() const;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

// The named templates of a model folder, chosen per request as transformers' apply_chat_template chooses.
class ChatTemplates {
 public:
  ChatTemplates() = default;  // no templates, no special tokens

  // Every template of `dir`, by name:
  //   tokenizer_config.json's chat_template: a string (the template "default") or a list of {"name", "template"};
  //   chat_template.jinja beside it (newer transformers): the template "default", replacing the config's;
  //   additional_chat_templates/NAME.jinja (newer transformers): the template NAME, replacing the config's;
  // with the special tokens of tokenizer_config.json (bos_token, eos_token, ... as strings or {"content": ...};
  // additional_special_tokens). `override_file` (the server's --chat-template FILE) replaces every template of
  // the folder: it is then the only one, "default". A folder without templates gives an empty set (its special
  // tokens still load, for compile()). Throws tide::Error on an unreadable or invalid file or template.
  static ChatTemplates from_model_dir(const std::filesystem::path& dir,
                                      const std::optional<std::filesystem::path>& override_file = {});
  // A set of the given (name, source) templates compiled with `special_tokens`, as from_model_dir builds one
  // (a repeated name: the last source).
  ChatTemplates(std::vector<std::pair<std::string, std::string>> sources, nlohmann::json special_tokens);

  bool empty() const { return templates_.empty(); }
  // The names, sorted.
  std::vector<std::string> names() const;
  // The template `name`, or null.
  const ChatTemplate* find(std::string_view name) const;

  // The name of the template a request gets: `requested_name` when given (tide::Error listing the available
  // names when there is none of that name); else "tool_use" when the request has tools and the model has
  // that template; else "rag" when the request has documents (and no tools) and the model has it; else
  // "default". tide::Error when the set is empty, or has no "default" and nothing else applies.
  // has_tools / has_documents: what transformers tests, `tools is not None` (an empty list counts).
  // (transformers itself never picks "rag"; Cohere's documentation renders grounded generation with it.)
  const std::string& select_name(const std::optional<std::string>& requested_name, bool has_tools,
                                 bool has_documents) const;
  // The template select_name names.
  const ChatTemplate& select(const std::optional<std::string>& requested_name, bool has_tools,
                             bool has_documents) const;
  // Selects with inputs.tools / inputs.documents not null, then renders.
  std::string render(const ChatTemplateInputs& inputs, const std::optional<std::string>& requested_name = {}) const;

  // Compiles a template given as text (a request's own template) with this folder's special tokens.
  ChatTemplate compile(std::string source) const;
  const nlohmann::json& special_tokens() const { return special_tokens_; }

 private:
  std::vector<std::pair<std::string, ChatTemplate>> templates_;  // sorted by name
  nlohmann::json special_tokens_ = nlohmann::json::object();
};

}  // namespace tide

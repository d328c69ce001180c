// ChatTemplate: turns a conversation (OpenAI-style messages) into the prompt text a checkpoint expects, by
// rendering its Jinja2 chat_template the way transformers' apply_chat_template does (same variables, same
// whitespace handling: trim_blocks and lstrip_blocks on, keep_trailing_newline off). The template language is
// tide's own Jinja2-subset interpreter (src/chat/jinja*), since no C++ Jinja engine is packaged.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace tide {

// What a template sees besides the special tokens.
struct ChatTemplateInputs {
  // Ordered: objects keep the client's key order, as transformers' templates see them (tojson of tools).
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // [{"role", "content", ...}] as sent
  bool add_generation_prompt = true;
  nlohmann::ordered_json tools;      // null, or the request's tools array
  nlohmann::ordered_json documents;  // null, or documents for retrieval-augmented generation
  // More variables (chat_template_kwargs); they do not override the above.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
};

class ChatTemplate {
 public:
  // Parses `source`. `special_tokens`: variables such as {"bos_token": "<BOS_TOKEN>", "eos_token": ...}.
  // Throws tide::Error naming the line and column of a syntax error.
  ChatTemplate(std::string source, nlohmann::json special_tokens);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // The template of a model folder: `override_file` when given (a Jinja file), else tokenizer_config.json's
  // chat_template (a string, or a list of {"name", "template"} of which "default" is taken, or `name` when
  // given), with tokenizer_config.json's bos_token / eos_token / unk_token / pad_token (strings or
  // {"content": ...}). nullopt when the folder has no template. Throws tide::Error on an unreadable or invalid
  // file or template.
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
  std::unique_ptr<Impl> impl_;
};

}  // namespace tide

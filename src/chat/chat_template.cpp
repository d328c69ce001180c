// ChatTemplate: a checkpoint's chat_template rendered with transformers' variables (see chat_template.h).
#include "chat/chat_template.h"

#include <fstream>
#include <sstream>

#include "chat/jinja_template.h"
#include "core/error.h"

namespace tide {

namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) fail("cannot read chat template file {}", path.string());
  std::ostringstream text;
  text << file.rdbuf();
  if (file.bad()) fail("error reading {}", path.string());
  return text.str();
}

// A special token of tokenizer_config.json: a string, or an AddedToken {"content": ...}; nullopt otherwise.
std::optional<std::string> token_text(const nlohmann::json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content") && value["content"].is_string()) {
    return value["content"].get<std::string>();
  }
  return std::nullopt;
}

// What transformers' special_tokens_map holds: the named special tokens that are set.
nlohmann::json special_tokens_of(const nlohmann::json& config) {
  nlohmann::json tokens = nlohmann::json::object();
  for (const char* name :
       {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    if (!config.contains(name)) continue;
    if (auto text = token_text(config[name])) tokens[name] = *text;
  }
  if (config.contains("additional_special_tokens") && config["additional_special_tokens"].is_array()) {
    nlohmann::json extra = nlohmann::json::array();
    for (const auto& token : config["additional_special_tokens"]) {
      if (auto text = token_text(token)) extra.push_back(*text);
    }
    tokens["additional_special_tokens"] = std::move(extra);
  }
  return tokens;
}

// tokenizer_config.json's chat_template: a string, or [{"name", "template"}] of which `name` (else "default").
std::optional<std::string> template_from_config(const nlohmann::json& config, const std::optional<std::string>& name,
                                                const std::filesystem::path& path) {
  if (!config.contains("chat_template") || config["chat_template"].is_null()) return std::nullopt;
  const nlohmann::json& value = config["chat_template"];
  if (value.is_string()) {
    if (name && *name != "default") fail("{}: chat_template has no template named '{}'", path.string(), *name);
    return value.get<std::string>();
  }
  if (!value.is_array()) fail("{}: chat_template must be a string or a list of {{name, template}}", path.string());
  const std::string wanted = name.value_or("default");
  for (const auto& entry : value) {
    if (entry.is_object() && entry.value("name", "") == wanted && entry.contains("template") &&
        entry["template"].is_string()) {
      return entry["template"].get<std::string>();
    }
  }
  fail("{}: chat_template has no template named '{}'", path.string(), wanted);
}

nlohmann::json read_json(const std::filesystem::path& path) {
  try {
    return nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& error) {
    fail("{}: invalid JSON: {}", path.string(), error.what());
  }
}

}  // namespace

struct ChatTemplate::Impl {
  std::string source;
  jinja::Template compiled;
  nlohmann::json special_tokens;
};

ChatTemplate::ChatTemplate(std::string source, nlohmann::json special_tokens) {
  jinja::Template compiled(source);
  impl_ = std::make_unique<Impl>(Impl{std::move(source), std::move(compiled), std::move(special_tokens)});
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

const std::string& ChatTemplate::source() const { return impl_->source; }

std::optional<ChatTemplate> ChatTemplate::from_model_dir(const std::filesystem::path& dir,
                                                         const std::optional<std::filesystem::path>& override_file,
                                                         const std::optional<std::string>& name) {
  const std::filesystem::path config_path = dir / "tokenizer_config.json";
  const nlohmann::json config =
      std::filesystem::exists(config_path) ? read_json(config_path) : nlohmann::json::object();
  nlohmann::json special_tokens = special_tokens_of(config);
  if (override_file) return ChatTemplate(read_file(*override_file), std::move(special_tokens));
  // Newer transformers save the template beside the config, and that file wins over the config's copy.
  const std::filesystem::path jinja_path = dir / "chat_template.jinja";
  if (std::filesystem::exists(jinja_path)) return ChatTemplate(read_file(jinja_path), std::move(special_tokens));
  auto source = template_from_config(config, name, config_path);
  if (!source) return std::nullopt;
  return ChatTemplate(std::move(*source), std::move(special_tokens));
}

std::string ChatTemplate::render(const ChatTemplateInputs& inputs) const {
  jinja::Dict variables;
  for (const auto& [key, value] : impl_->special_tokens.items())
    variables.set(jinja::Value::string(key), jinja::from_json(value));
  for (const auto& [key, value] : inputs.extra.items())
    variables.set(jinja::Value::string(key), jinja::from_json(value));
  variables.set(jinja::Value::string("messages"), jinja::from_json(inputs.messages));
  variables.set(jinja::Value::string("add_generation_prompt"), jinja::Value::boolean(inputs.add_generation_prompt));
  variables.set(jinja::Value::string("tools"), jinja::from_json(inputs.tools));
  variables.set(jinja::Value::string("documents"), jinja::from_json(inputs.documents));
  return impl_->compiled.render(variables);
}

}  // namespace tide

// ChatTemplate: a checkpoint's chat_template rendered with transformers' variables (see chat_template.h).
#include "chat/chat_template.h"

#include <fstream>
#include <map>
#include <sstream>

#include <fmt/ranges.h>

#include "chat/jinja/jinja_template.h"
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

// tokenizer_config.json's chat_template as (name, source) pairs: a string is "default"; a list holds
// {"name", "template"} entries (a repeated name: the last one, as transformers' dict of them).
std::vector<std::pair<std::string, std::string>> templates_from_config(const nlohmann::json& config,
                                                                       const std::filesystem::path& path) {
  std::vector<std::pair<std::string, std::string>> out;
  if (!config.contains("chat_template") || config["chat_template"].is_null()) return out;
  const nlohmann::json& value = config["chat_template"];
  if (value.is_string()) {
    out.emplace_back("default", value.get<std::string>());
    return out;
  }
  const auto invalid = [&] {
    fail("{}: chat_template must be a string or a list of {{\"name\": ..., \"template\": ...}}", path.string());
  };
  if (!value.is_array()) invalid();
  for (const auto& entry : value) {
    if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string() || !entry.contains("template") ||
        !entry["template"].is_string()) {
      invalid();
    }
    out.emplace_back(entry["name"].get<std::string>(), entry["template"].get<std::string>());
  }
  return out;
}

// Sets (name, source), replacing an earlier template of that name.
void put(std::vector<std::pair<std::string, std::string>>& sources, std::string name, std::string source) {
  for (auto& entry : sources) {
    if (entry.first == name) {
      entry.second = std::move(source);
      return;
    }
  }
  sources.emplace_back(std::move(name), std::move(source));
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
  impl_ = std::make_shared<const Impl>(Impl{std::move(source), std::move(compiled), std::move(special_tokens)});
}

const std::string& ChatTemplate::source() const { return impl_->source; }

std::optional<ChatTemplate> ChatTemplate::from_model_dir(const std::filesystem::path& dir,
                                                         const std::optional<std::filesystem::path>& override_file,
                                                         const std::optional<std::string>& name) {
  const ChatTemplates templates = ChatTemplates::from_model_dir(dir, override_file);
  if (templates.empty()) return std::nullopt;
  return templates.select(name, /*has_tools=*/false, /*has_documents=*/false);
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

// --- ChatTemplates ---

ChatTemplates::ChatTemplates(std::vector<std::pair<std::string, std::string>> sources, nlohmann::json special_tokens)
    : special_tokens_(std::move(special_tokens)) {
  std::map<std::string, std::string> by_name;  // sorted; a repeated name keeps its last source
  for (auto& [name, source] : sources) by_name[name] = std::move(source);
  for (auto& [name, source] : by_name) {
    try {
      templates_.emplace_back(name, ChatTemplate(std::move(source), special_tokens_));
    } catch (const Error& error) {
      if (by_name.size() == 1) throw;
      fail("chat template '{}': {}", name, error.what());
    }
  }
}

ChatTemplates ChatTemplates::from_model_dir(const std::filesystem::path& dir,
                                            const std::optional<std::filesystem::path>& override_file) {
  const std::filesystem::path config_path = dir / "tokenizer_config.json";
  const nlohmann::json config =
      std::filesystem::exists(config_path) ? read_json(config_path) : nlohmann::json::object();
  nlohmann::json special_tokens = special_tokens_of(config);
  if (override_file) return ChatTemplates({{"default", read_file(*override_file)}}, std::move(special_tokens));
  std::vector<std::pair<std::string, std::string>> sources = templates_from_config(config, config_path);
  const std::filesystem::path jinja_path = dir / "chat_template.jinja";
  if (std::filesystem::exists(jinja_path)) put(sources, "default", read_file(jinja_path));
  const std::filesystem::path extra_dir = dir / "additional_chat_templates";
  if (std::filesystem::is_directory(extra_dir)) {
    for (const auto& entry : std::filesystem::directory_iterator(extra_dir)) {
      if (entry.path().extension() == ".jinja") put(sources, entry.path().stem().string(), read_file(entry.path()));
    }
  }
  return ChatTemplates(std::move(sources), std::move(special_tokens));
}

std::vector<std::string> ChatTemplates::names() const {
  std::vector<std::string> out;
  for (const auto& entry : templates_) out.push_back(entry.first);
  return out;
}

const ChatTemplate* ChatTemplates::find(std::string_view name) const {
  for (const auto& entry : templates_) {
    if (entry.first == name) return &entry.second;
  }
  return nullptr;
}

const std::string& ChatTemplates::select_name(const std::optional<std::string>& requested_name, bool has_tools,
                                              bool has_documents) const {
  if (templates_.empty()) fail("the model has no chat template");
  const auto named = [&](std::string_view name) -> const std::string* {
    for (const auto& entry : templates_) {
      if (entry.first == name) return &entry.first;
    }
    return nullptr;
  };
  const std::string available = fmt::format("'{}'", fmt::join(names(), "', '"));
  if (requested_name) {
    if (const std::string* name = named(*requested_name)) return *name;
    fail("the model has no chat template named '{}' (it has {})", *requested_name, available);
  }
  if (has_tools) {
    if (const std::string* name = named("tool_use")) return *name;
  }
  if (has_documents && !has_tools) {
    if (const std::string* name = named("rag")) return *name;
  }
  if (const std::string* name = named("default")) return *name;
  fail("the model's chat templates ({}) include no 'default', and none of them applies to this request; name one",
       available);
}

const ChatTemplate& ChatTemplates::select(const std::optional<std::string>& requested_name, bool has_tools,
                                          bool has_documents) const {
  return *find(select_name(requested_name, has_tools, has_documents));
}

std::string ChatTemplates::render(const ChatTemplateInputs& inputs,
                                  const std::optional<std::string>& requested_name) const {
  return select(requested_name, !inputs.tools.is_null(), !inputs.documents.is_null()).render(inputs);
}

ChatTemplate ChatTemplates::compile(std::string source) const { return ChatTemplate(std::move(source), special_tokens_); }

}  // namespace tide

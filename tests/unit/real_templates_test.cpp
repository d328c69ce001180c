// Cohere's real chat templates against Python jinja2: tests/fixtures/chat-templates/cases.json holds what jinja2
// (configured as transformers' apply_chat_template configures it) rendered or raised for each template over
// many conversations (tools, tool calls and results, documents, content parts, reasoning, big integers,
// unicode); tools/chat/real_template_cases.py regenerates it. tide must render the same bytes, or fail where
// jinja2 failed (with the same message for raise_exception), and pick the same template of a named set.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "chat/json_exact.h"
#include "core/error.h"

namespace tide {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

const fs::path kTemplatesDir = fs::path(TIDE_FIXTURES_DIR) / "chat-templates";

std::string read_text(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

struct RealCase {
  std::string name;
  Json data;
};

// The cases, read exactly (integers beyond 64 bits stay integers, as Python wrote them).
std::vector<RealCase> load_cases() {
  const fs::path path = kTemplatesDir / "cases.json";
  if (!fs::exists(path)) return {};
  const Json root = parse_json_exact(read_text(path), 1000);
  std::vector<RealCase> cases;
  for (const Json& entry : root["cases"]) {
    std::string name = entry["name"].get<std::string>();
    for (char& c : name) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
    cases.push_back({std::move(name), entry});
  }
  return cases;
}

ChatTemplateInputs inputs_of(const Json& c) {
  ChatTemplateInputs inputs;
  inputs.messages = c["messages"];
  inputs.tools = c["tools"];
  inputs.documents = c["documents"];
  inputs.add_generation_prompt = c["add_generation_prompt"].get<bool>();
  inputs.extra = c["kwargs"];
  return inputs;
}

// "command-r7b-12-2024.tool_use" -> ("command-r7b-12-2024", "tool_use").
std::pair<std::string, std::string> split_stem(const std::string& stem) {
  const size_t dot = stem.rfind('.');
  return {stem.substr(0, dot), stem.substr(dot + 1)};
}

// Every template of `model` as one named set, as a model folder would hold them.
ChatTemplates model_templates(const std::string& model, const nlohmann::json& special_tokens) {
  std::vector<std::pair<std::string, std::string>> sources;
  for (const auto& entry : fs::directory_iterator(kTemplatesDir)) {
    const std::string file = entry.path().filename().string();
    if (entry.path().extension() != ".jinja" || file.rfind(model + ".", 0) != 0) continue;
    sources.emplace_back(split_stem(entry.path().stem().string()).second, read_text(entry.path()));
  }
  return ChatTemplates(std::move(sources), special_tokens);
}

class RealTemplate : public ::testing::TestWithParam<RealCase> {};

TEST_P(RealTemplate, RendersLikeJinja2) {
  const Json& c = GetParam().data;
  const std::string stem = c["template"].get<std::string>();
  const nlohmann::json special_tokens = c["special_tokens"];
  const ChatTemplate chat(read_text(kTemplatesDir / (stem + ".jinja")), special_tokens);
  const ChatTemplateInputs inputs = inputs_of(c);
  if (c.contains("expected")) {
    std::string text;
    ASSERT_NO_THROW(text = chat.render(inputs));
    EXPECT_EQ(text, c["expected"].get<std::string>());
  } else {
    SCOPED_TRACE("jinja2 raised " + c["error_type"].get<std::string>() + ": " + c["error"].get<std::string>());
    try {
      chat.render(inputs);
      ADD_FAILURE() << "expected an error";
    } catch (const Error& error) {
      if (c.value("exact_error", false)) {
        EXPECT_EQ(std::string(error.what()), c["error"].get<std::string>());
      }
    }
  }
  if (!c.contains("selected")) return;
  // The model's named set picks this template exactly when transformers' rule (and "rag" for documents) does.
  const auto [model, name] = split_stem(stem);
  const ChatTemplates templates = model_templates(model, special_tokens);
  const bool selected = templates.select_name({}, !inputs.tools.is_null(), !inputs.documents.is_null()) == name;
  EXPECT_EQ(selected, c["selected"].get<bool>());
  if (selected && c.contains("expected")) {
    EXPECT_EQ(templates.render(inputs), c["expected"].get<std::string>());
  }
}

INSTANTIATE_TEST_SUITE_P(Jinja2, RealTemplate, ::testing::ValuesIn(load_cases()),
                         [](const ::testing::TestParamInfo<RealCase>& info) { return info.param.name; });

TEST(RealTemplateFixture, CoversEveryTemplateAndBigIntegers) {
  const std::vector<RealCase> cases = load_cases();
  ASSERT_GE(cases.size(), 200u);
  std::map<std::string, int> rendered;
  int big_integer_cases = 0;
  for (const RealCase& c : cases) {
    if (c.data.contains("expected")) ++rendered[c.data["template"].get<std::string>()];
    if (dump_json_exact(c.data).find("18446744073709551617") != std::string::npos) ++big_integer_cases;
  }
  EXPECT_EQ(rendered.size(), 4u);
  for (const auto& [stem, count] : rendered) EXPECT_GE(count, 25) << stem;
  EXPECT_GE(big_integer_cases, 8);
}

// The digits of integers beyond 64 bits reach the prompt exactly, where a double would print 1.8446744073709552e+19.
TEST(RealTemplateFixture, BigIntegersPrintExactly) {
  for (const RealCase& c : load_cases()) {
    if (c.name.find("tools_big_integers") == std::string::npos || !c.data.contains("expected")) continue;
    const std::string text = c.data["expected"].get<std::string>();
    EXPECT_NE(text.find("18446744073709551617"), std::string::npos) << c.name;
    EXPECT_NE(text.find("1" + std::string(400, '0')), std::string::npos) << c.name;
    EXPECT_EQ(text.find("e+19"), std::string::npos) << c.name;
  }
}

// A model folder as Cohere ships Command R7B: the three templates as a named list in tokenizer_config.json.
TEST(RealTemplateFolder, CommandR7BNamedList) {
  const fs::path dir = fs::temp_directory_path() / ("tide_real_templates_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  nlohmann::ordered_json config = {{"bos_token", "<BOS_TOKEN>"}, {"eos_token", "<|END_OF_TURN_TOKEN|>"}};
  config["chat_template"] = nlohmann::ordered_json::array();
  for (const char* name : {"default", "tool_use", "rag"}) {
    config["chat_template"].push_back(
        {{"name", name}, {"template", read_text(kTemplatesDir / (std::string("command-r7b-12-2024.") + name + ".jinja"))}});
  }
  std::ofstream(dir / "tokenizer_config.json") << config.dump();
  const ChatTemplates templates = ChatTemplates::from_model_dir(dir);
  fs::remove_all(dir);
  EXPECT_EQ(templates.names(), (std::vector<std::string>{"default", "rag", "tool_use"}));
  EXPECT_EQ(templates.select_name({}, false, false), "default");
  EXPECT_EQ(templates.select_name({}, true, false), "tool_use");
  EXPECT_EQ(templates.select_name({}, false, true), "rag");
  EXPECT_EQ(templates.select_name({}, true, true), "tool_use");
  EXPECT_EQ(templates.select({}, true, false).source(), read_text(kTemplatesDir / "command-r7b-12-2024.tool_use.jinja"));
  ChatTemplateInputs inputs;
  inputs.messages = Json::array({{{"role", "user"}, {"content", "Hi"}}});
  EXPECT_EQ(templates.render(inputs),
            "<BOS_TOKEN><|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|><|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|>"
            "<|USER_TOKEN|>Hi<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|><|START_RESPONSE|>");
}

}  // namespace
}  // namespace tide

// ChatTemplate against transformers: the fixture folders' chat_cases.json hold apply_chat_template's text (and its
// ids) for the folder's chat_template; tide must render the same bytes and tokenize them to the same ids.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "../chat_cases.h"
#include "chat/chat_template.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace tide {
namespace {

namespace fs = std::filesystem;

const fs::path kFixtures = TIDE_FIXTURES_DIR;

nlohmann::json read_json(const fs::path& path) {
  std::ifstream file(path);
  return nlohmann::json::parse(file);
}

class ChatTemplateFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(ChatTemplateFixture, RendersLikeTransformers) {
  const fs::path dir = kFixtures / GetParam();
  const auto chat = ChatTemplate::from_model_dir(dir);
  ASSERT_TRUE(chat.has_value());
  const Tokenizer tokenizer = Tokenizer::from_dir(dir);
  const nlohmann::json cases = read_json(dir / "chat_cases.json")["cases"];
  ASSERT_FALSE(cases.empty());
  const int num_errors = test::check_chat_cases(*chat, tokenizer, cases);
  EXPECT_EQ(num_errors, 1);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ChatTemplateFixture, ::testing::Values("cohere2-tiny", "cohere2-tiny-hd128"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return name;
                         });

// --- loading from a folder ---

class ChatTemplateDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tide_chat_template_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void write(const std::string& name, const std::string& text) { std::ofstream(dir_ / name) << text; }

  fs::path dir_;
};

TEST_F(ChatTemplateDir, NoTemplateIsNullopt) {
  write("tokenizer_config.json", R"({"bos_token": "<s>"})");
  EXPECT_FALSE(ChatTemplate::from_model_dir(dir_).has_value());
}

TEST_F(ChatTemplateDir, SpecialTokensAsAddedTokenObjects) {
  write("tokenizer_config.json",
        R"({"bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>", "unk_token": null,
            "chat_template": "{{ bos_token }}|{{ eos_token }}|{{ unk_token is defined }}|{{ tools is none }}|{{ documents is none }}"})");
  const auto chat = ChatTemplate::from_model_dir(dir_);
  ASSERT_TRUE(chat.has_value());
  EXPECT_EQ(chat->render({}), "<s>|</s>|False|True|True");
}

TEST_F(ChatTemplateDir, NamedTemplates) {
  write(
      "tokenizer_config.json",
      R"({"chat_template": [{"name": "default", "template": "D"}, {"name": "tool_use", "template": "T{{ tools|length }}"}]})");
  EXPECT_EQ(ChatTemplate::from_model_dir(dir_)->render({}), "D");
  ChatTemplateInputs inputs;
  inputs.tools = nlohmann::json::array({{{"type", "function"}}});
  EXPECT_EQ(ChatTemplate::from_model_dir(dir_, {}, std::string("tool_use"))->render(inputs), "T1");
  EXPECT_THROW(ChatTemplate::from_model_dir(dir_, {}, std::string("rag")), Error);
}

TEST_F(ChatTemplateDir, OverrideFileAndJinjaFile) {
  write("tokenizer_config.json", R"({"chat_template": "config", "eos_token": "E"})");
  EXPECT_EQ(ChatTemplate::from_model_dir(dir_)->render({}), "config");
  write("chat_template.jinja", "jinja file {{ eos_token }}\n");
  EXPECT_EQ(ChatTemplate::from_model_dir(dir_)->render({}), "jinja file E");
  write("override.jinja", "override {{ messages|length }}");
  ChatTemplateInputs inputs;
  inputs.messages = nlohmann::json::array({{{"role", "user"}, {"content", "x"}}});
  EXPECT_EQ(ChatTemplate::from_model_dir(dir_, dir_ / "override.jinja")->render(inputs), "override 1");
}

TEST_F(ChatTemplateDir, ExtraVariablesAndInvalidTemplate) {
  ChatTemplate chat("{{ greeting }} {{ add_generation_prompt }}", nlohmann::json::object());
  ChatTemplateInputs inputs;
  inputs.extra = {{"greeting", "hi"}, {"add_generation_prompt", "ignored"}};
  EXPECT_EQ(chat.render(inputs), "hi True");
  write("tokenizer_config.json", R"({"chat_template": "{% if %}"})");
  EXPECT_THROW(ChatTemplate::from_model_dir(dir_), Error);
  EXPECT_THROW(ChatTemplate::from_model_dir(dir_, dir_ / "missing.jinja"), Error);
}

TEST_F(ChatTemplateDir, ToolsKeepTheClientsKeyOrder) {
  // transformers renders tools with tojson in the order the client wrote the keys, not sorted.
  ChatTemplate chat("{{ tools | tojson }}", nlohmann::json::object());
  ChatTemplateInputs inputs;
  inputs.tools = nlohmann::ordered_json::parse(
      R"([{"type": "function", "function": {"name": "f", "parameters": {"zeta": 1, "alpha": 2}}}])");
  EXPECT_EQ(chat.render(inputs),
            R"([{"type": "function", "function": {"name": "f", "parameters": {"zeta": 1, "alpha": 2}}}])");
}

}  // namespace
}  // namespace tide

// ChatTemplate against transformers: the fixture folders' chat_cases.json hold apply_chat_template's text (and its
// ids) for the folder's chat_template; tide must render the same bytes and tokenize them to the same ids. Then
// ChatTemplates: a folder's templates (tokenizer_config.json, chat_template.jinja, additional_chat_templates/,
// an override file) and the one each request gets.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

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

// Runs `fn` expecting tide::Error; returns its message.
template <typename Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const Error& error) {
    return error.what();
  }
  ADD_FAILURE() << "expected tide::Error";
  return "";
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

// --- ChatTemplates: every template of a folder, chosen per request ---

TEST_F(ChatTemplateDir, NamedListSelection) {
  write("tokenizer_config.json", R"({"bos_token": "<B>", "chat_template": [
      {"name": "default", "template": "D{{ bos_token }}"}, {"name": "tool_use", "template": "T"},
      {"name": "rag", "template": "R"}]})");
  const ChatTemplates templates = ChatTemplates::from_model_dir(dir_);
  EXPECT_EQ(templates.names(), (std::vector<std::string>{"default", "rag", "tool_use"}));
  EXPECT_EQ(templates.select_name({}, false, false), "default");
  EXPECT_EQ(templates.select_name({}, true, false), "tool_use");
  EXPECT_EQ(templates.select_name({}, false, true), "rag");
  EXPECT_EQ(templates.select_name({}, true, true), "tool_use");  // tools win over documents
  EXPECT_EQ(templates.select_name(std::string("rag"), true, false), "rag");
  EXPECT_EQ(templates.select({}, false, false).render({}), "D<B>");
  // render() selects with tools / documents not null (an empty list counts, as transformers' `is not None`).
  ChatTemplateInputs inputs;
  inputs.tools = nlohmann::ordered_json::array();
  EXPECT_EQ(templates.render(inputs), "T");
  inputs.tools = nullptr;
  inputs.documents = nlohmann::ordered_json::array({"doc"});
  EXPECT_EQ(templates.render(inputs), "R");
  EXPECT_EQ(templates.render(inputs, std::string("default")), "D<B>");
}

TEST_F(ChatTemplateDir, RepeatedNameTakesTheLastTemplate) {
  write("tokenizer_config.json", R"({"chat_template": [{"name": "default", "template": "first"},
      {"name": "rag", "template": "R"}, {"name": "default", "template": "second"}]})");
  const ChatTemplates templates = ChatTemplates::from_model_dir(dir_);
  EXPECT_EQ(templates.names(), (std::vector<std::string>{"default", "rag"}));
  EXPECT_EQ(templates.select({}, false, false).render({}), "second");
}

TEST_F(ChatTemplateDir, UnknownNameListsTheAvailableOnes) {
  write("tokenizer_config.json",
        R"({"chat_template": [{"name": "default", "template": "D"}, {"name": "tool_use", "template": "T"}]})");
  const ChatTemplates templates = ChatTemplates::from_model_dir(dir_);
  try {
    templates.select(std::string("rag"), false, true);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& error) {
    EXPECT_STREQ(error.what(), "the model has no chat template named 'rag' (it has 'default', 'tool_use')");
  }
  EXPECT_EQ(templates.select_name({}, false, true), "default");  // documents, but no "rag": the default
  EXPECT_EQ(templates.find("rag"), nullptr);
  ASSERT_NE(templates.find("tool_use"), nullptr);
  EXPECT_EQ(templates.find("tool_use")->source(), "T");
}

TEST_F(ChatTemplateDir, NoDefaultAndNothingApplicable) {
  write("tokenizer_config.json", R"({"chat_template": [{"name": "tool_use", "template": "T"}]})");
  const ChatTemplates templates = ChatTemplates::from_model_dir(dir_);
  EXPECT_EQ(templates.select_name({}, true, false), "tool_use");
  const std::string message = error_of([&] { templates.select({}, false, false); });
  EXPECT_NE(message.find("include no 'default'"), std::string::npos) << message;
  EXPECT_FALSE(ChatTemplate::from_model_dir(dir_, {}, std::string("tool_use")).value().source().empty());
  EXPECT_THROW(ChatTemplate::from_model_dir(dir_), Error);
}

TEST_F(ChatTemplateDir, EmptySetStillCompiles) {
  write("tokenizer_config.json", R"({"bos_token": "<B>", "eos_token": {"content": "<E>"}})");
  const ChatTemplates templates = ChatTemplates::from_model_dir(dir_);
  EXPECT_TRUE(templates.empty());
  EXPECT_TRUE(templates.names().empty());
  EXPECT_NE(error_of([&] { templates.select({}, false, false); }).find("no chat template"), std::string::npos);
  // A request's own template gets the folder's special tokens.
  EXPECT_EQ(templates.compile("{{ bos_token }}{{ messages|length }}{{ eos_token }}").render({}), "<B>0<E>");
  EXPECT_THROW(templates.compile("{% if %}"), Error);
}

TEST_F(ChatTemplateDir, JinjaFilesBesideTheConfig) {
  write("tokenizer_config.json", R"({"eos_token": "E", "chat_template": [{"name": "default", "template": "config"},
      {"name": "tool_use", "template": "config tools"}, {"name": "rag", "template": "config rag"}]})");
  write("chat_template.jinja", "jinja default {{ eos_token }}\n");
  fs::create_directories(dir_ / "additional_chat_templates");
  write("additional_chat_templates/tool_use.jinja", "jinja tools");
  write("additional_chat_templates/summarize.jinja", "jinja summarize");
  write("additional_chat_templates/notes.txt", "not a template");
  const ChatTemplates templates = ChatTemplates::from_model_dir(dir_);
  EXPECT_EQ(templates.names(), (std::vector<std::string>{"default", "rag", "summarize", "tool_use"}));
  EXPECT_EQ(templates.select({}, false, false).render({}), "jinja default E");
  EXPECT_EQ(templates.select({}, true, false).render({}), "jinja tools");
  EXPECT_EQ(templates.select({}, false, true).render({}), "config rag");
  EXPECT_EQ(templates.select(std::string("summarize"), false, false).render({}), "jinja summarize");
}

TEST_F(ChatTemplateDir, OverrideReplacesEveryTemplate) {
  write("tokenizer_config.json", R"({"bos_token": "<B>", "chat_template": [{"name": "default", "template": "D"},
      {"name": "tool_use", "template": "T"}]})");
  write("override.jinja", "override {{ bos_token }}");
  const ChatTemplates templates = ChatTemplates::from_model_dir(dir_, dir_ / "override.jinja");
  EXPECT_EQ(templates.names(), (std::vector<std::string>{"default"}));
  EXPECT_EQ(templates.select({}, true, true).render({}), "override <B>");
  EXPECT_THROW(templates.select(std::string("tool_use"), true, false), Error);
}

TEST_F(ChatTemplateDir, InvalidNamedTemplatesAreNamed) {
  write("tokenizer_config.json", R"({"chat_template": [{"name": "default", "template": "ok"},
      {"name": "rag", "template": "{% for %}"}]})");
  const std::string message = error_of([&] { ChatTemplates::from_model_dir(dir_); });
  EXPECT_EQ(message.rfind("chat template 'rag': ", 0), 0u) << message;
  write("tokenizer_config.json", R"({"chat_template": [{"name": "default"}]})");
  EXPECT_NE(error_of([&] { ChatTemplates::from_model_dir(dir_); }).find("must be a string or a list"), std::string::npos);
  write("tokenizer_config.json", R"({"chat_template": 5})");
  EXPECT_THROW(ChatTemplates::from_model_dir(dir_), Error);
}

// Messages reach the template as sent: nothing is normalized on the way (the expected text is jinja2's).
TEST(ChatTemplateInputsTest, MessagesAreHandedOverUnchanged) {
  const ChatTemplate chat(
      "{% for m in messages %}[{{ m.content is string }} {{ m.content is none }} {{ m.content is defined }} "
      "{{ m.content is sequence and m.content is not string }} {{ m.tool_calls is defined }}]{% endfor %}"
      "{{ messages[2].content[0].text }}{{ messages|tojson }}",
      nlohmann::json::object());
  ChatTemplateInputs inputs;
  inputs.messages = nlohmann::ordered_json::parse(R"([
      {"role": "user", "content": "s"},
      {"role": "assistant", "content": null, "tool_calls": []},
      {"role": "user", "content": [{"type": "text", "text": "part"}]},
      {"role": "assistant"}])");
  EXPECT_EQ(chat.render(inputs),
            "[True False True False False][False True True False True][False False True True False]"
            "[False False False True False]part"  // jinja2 too calls an undefined value a sequence
            R"([{"role": "user", "content": "s"}, {"role": "assistant", "content": null, "tool_calls": []}, )"
            R"({"role": "user", "content": [{"type": "text", "text": "part"}]}, {"role": "assistant"}])");
}

}  // namespace
}  // namespace tide

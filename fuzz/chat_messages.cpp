// Fuzzes a real chat template (tests/fixtures/cohere2-tiny's, Cohere's format) with fuzzed inputs: the input is
// JSON, either the messages array or an object {"messages", "add_generation_prompt", "tools", "documents",
// "chat_template_kwargs"} as a chat request carries them, read by the server's body parser (which bounds the
// nesting depth). Whatever the messages hold (wrong types, missing keys, odd values), rendering gives text or a
// tide::Error; the rendered text tokenizes.
#include "chat/chat_template.h"
#include "fuzz/fuzz_util.h"
#include "fuzz/tiny_model.h"
#include "server/api_error.h"
#include "server/openai_protocol.h"
#include "tokenizer/tokenizer.h"

namespace {

tide::ChatTemplateInputs inputs_of(const nlohmann::ordered_json& json) {
  tide::ChatTemplateInputs inputs;
  if (!json.is_object()) {
    inputs.messages = json;
    return inputs;
  }
  if (json.contains("messages")) inputs.messages = json["messages"];
  if (json.contains("add_generation_prompt") && json["add_generation_prompt"].is_boolean())
    inputs.add_generation_prompt = json["add_generation_prompt"].get<bool>();
  if (json.contains("tools")) inputs.tools = json["tools"];
  if (json.contains("documents")) inputs.documents = json["documents"];
  if (json.contains("chat_template_kwargs") && json["chat_template_kwargs"].is_object())
    inputs.extra = json["chat_template_kwargs"];
  return inputs;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const tide::fuzz::TinyModel& f = tide::fuzz::tiny_model();
  nlohmann::ordered_json json;
  try {
    json = tide::server::parse_body(tide::fuzz::as_text(data, size));
  } catch (const tide::server::ApiError&) {
    return 0;
  }
  tide::fuzz::accepted([&] {
    const std::string text = f.chat_template.render(inputs_of(json));
    const std::vector<int32_t> ids = f.tokenizer.encode(text, /*add_special_tokens=*/false);
    FUZZ_CHECK(!ids.empty());
  });
  return 0;
}

// Fuzzes tide's Jinja2-subset interpreter (src/chat) with template text: the input is a chat template. One that
// parses is rendered with the variables transformers gives a chat template (a fixed conversation with a system
// prompt, tool calls, tools and documents, the special tokens), under smaller limits than the server's, so that
// an input the limits do not bound shows up as a libFuzzer timeout.
#include "chat/jinja/jinja_template.h"
#include "fuzz/fuzz_util.h"

namespace {

const tide::jinja::Dict& variables() {
  static const tide::jinja::Dict vars = [] {
    const auto json = nlohmann::ordered_json::parse(R"({
      "bos_token": "<BOS_TOKEN>", "eos_token": "<|END_OF_TURN_TOKEN|>", "pad_token": "<PAD>", "unk_token": null,
      "messages": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is 2 + 2? Use the tool."},
        {"role": "assistant", "content": "", "tool_calls": [
          {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 2}}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "4"},
        {"role": "assistant", "content": "  It is 4.\n"},
        {"role": "user", "content": [{"type": "text", "text": "Thanks! ünïcødé 🎉"}]}
      ],
      "add_generation_prompt": true,
      "tools": [{"type": "function", "function": {"name": "add", "description": "Adds two numbers.",
                 "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "number"}},
                                "required": ["a", "b"]}}}],
      "documents": [{"title": "Numbers", "text": "Two plus two is four."}, {"id": 7, "text": ""}],
      "enable_thinking": false
    })");
    tide::jinja::Dict dict;
    for (const auto& [key, value] : json.items())
      dict.set(tide::jinja::Value::string(key), tide::jinja::from_json(value));
    return dict;
  }();
  return vars;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const tide::jinja::RenderLimits limits{
      .max_output_bytes = size_t{1} << 20, .max_call_depth = 64, .max_work = 2'000'000};
  tide::fuzz::accepted([&] {
    const tide::jinja::Template compiled(tide::fuzz::as_text(data, size));
    const std::string out = compiled.render(variables(), limits);
    FUZZ_CHECK(out.size() <= limits.max_output_bytes);
  });
  return 0;
}

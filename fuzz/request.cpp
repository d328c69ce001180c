// Fuzzes the request parsers (server/openai_protocol.h, and Cohere's /v2/chat in server/cohere_protocol.h) with
// request bodies: the input is a body, read by parse_body and then by every endpoint's parser. A request that
// parses goes on as the server takes it: its sampling parameters are validated, completion prompts and the chat's
// rendered template (OpenAI's and Cohere's chat alike) are tokenized with a real tokenizer
// (tests/fixtures/cohere2-tiny), and its stop strings run over the tokens. Refusals are ApiError 4xx (or
// tide::Error and nlohmann's exceptions from the template and tokenizer); anything else is a finding.
#include "chat/chat_template.h"
#include "fuzz/tiny_model.h"
#include "fuzz/tokenizer_checks.h"
#include "server/api_error.h"
#include "server/cohere_protocol.h"
#include "server/openai_protocol.h"

namespace {

using namespace tide::server;

// Runs `f`, swallowing the refusals a request may get (400s and the template's or tokenizer's errors).
template <typename F>
void refusable(F&& f) {
  try {
    tide::fuzz::accepted(f);
  } catch (const ApiError& e) {
    FUZZ_CHECK(e.status() >= 400 && e.status() < 500);
  }
}

// What the server does with the options before submitting: validation, and the stop strings over the output.
void check_options(const tide::GenerateOptions& options, const std::vector<int32_t>& ids) {
  refusable([&] { options.sampling.validate(); });
  FUZZ_CHECK(options.n >= 1);
  std::vector<std::string> stops;
  for (const std::string& s : options.stop)
    if (!s.empty()) stops.push_back(s);
  tide::fuzz::check_text_stream(tide::fuzz::tiny_model().tokenizer, ids, stops);
}

// The chat's prompt as the server renders it: tool_choice "none" offers the template no tools.
std::vector<int32_t> render_chat(const ChatRequest& request) {
  tide::ChatTemplateInputs inputs;
  inputs.messages = request.messages;
  inputs.add_generation_prompt = request.add_generation_prompt;
  if (request.tool_choice != "none") inputs.tools = request.tools;
  inputs.documents = request.documents;
  inputs.extra = request.chat_template_kwargs;
  return tide::fuzz::tiny_model().tokenizer.encode(tide::fuzz::tiny_model().chat_template.render(inputs), /*add_special_tokens=*/false);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const tide::fuzz::TinyModel& f = tide::fuzz::tiny_model();
  nlohmann::ordered_json body;
  try {
    body = parse_body(tide::fuzz::as_text(data, size));
  } catch (const ApiError& e) {
    FUZZ_CHECK(e.status() == 400);
    return 0;
  }
  refusable([&] {
    const CompletionRequest request = parse_completion_request(body);
    FUZZ_CHECK(!request.prompts.empty());
    for (const PromptInput& prompt : request.prompts) {
      std::vector<int32_t> ids = prompt.ids;
      if (prompt.text) ids = tide::fuzz::check_encode(f.tokenizer, *prompt.text);
      check_options(request.options, ids);
    }
  });
  refusable([&] {
    const ChatRequest request = parse_chat_request(body);
    std::vector<int32_t> ids;
    tide::fuzz::accepted([&] { ids = render_chat(request); });
    check_options(request.options, ids);
  });
  // Cohere's /v2/chat: the same ChatRequest, rendered the same way (its messages, documents and template
  // variables such as enable_citations, reasoning and safety_mode reach the template).
  refusable([&] {
    const ChatRequest request = parse_cohere_chat_request(body);
    FUZZ_CHECK(request.messages.is_array() && !request.messages.empty());
    FUZZ_CHECK(request.tool_choice == "none" || request.tool_choice == "auto");
    // The template is asked for citations exactly when they are parsed, and each document has its cited form.
    const auto& kwargs = request.chat_template_kwargs;
    FUZZ_CHECK(kwargs.contains("enable_citations") && kwargs["enable_citations"] == request.citations);
    FUZZ_CHECK(request.documents.size() == request.citation_documents.size());
    std::vector<int32_t> ids;
    tide::fuzz::accepted([&] { ids = render_chat(request); });
    check_options(request.options, ids);
  });
  refusable([&] {
    const TokenizeRequest request = parse_tokenize_request(body);
    if (request.prompt) tide::fuzz::check_encode(f.tokenizer, *request.prompt);
    if (request.chat) tide::fuzz::accepted([&] { (void)render_chat(*request.chat); });
  });
  refusable([&] {
    const DetokenizeRequest request = parse_detokenize_request(body);
    tide::fuzz::check_streaming(f.tokenizer, request.tokens, false);
  });
  return 0;
}

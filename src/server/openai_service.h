// OpenAiService: the OpenAI endpoints over a loaded Engine, without HTTP. prepare_*() check a parsed request
// against the model (served name, tokenization, the chat template, max_model_len) and throw ApiError; start()
// submits it; a GenerationRun gathers its deltas (from every prompt and sample) and turns them into the response
// (one JSON body, or streamed chunks). The HTTP layer only moves bytes and notices clients that went away.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "runtime/engine.h"
#include "server/metrics.h"
#include "server/openai_protocol.h"
#include "server/constraints.h"
#include "server/generation_run.h"

namespace tide::server {

// Declares the metrics the service updates (request latencies and outcomes) and the engine gauges that
// refresh_engine_metrics() sets.
void declare_metrics(MetricsRegistry& metrics);
// Copies the engine's counters and pool statistics into `metrics` (called before each scrape).
void refresh_engine_metrics(const Engine& engine, MetricsRegistry& metrics);

// The most samples (prompts x n) one request may ask for, unless the engine runs more requests at once.
inline constexpr int64_t kDefaultMaxSamplesPerRequest = 256;

// How chat requests are rendered and their output parsed (the server's flags).
struct ChatSettings {
  // A request's `chat_template` may be Jinja text (not only the name of one of the model's templates).
  bool trust_request_chat_template = false;
  // "auto": chat output is parsed (reasoning, tool calls, citations) when the template asks for Cohere's format;
  // "cohere": always, in the template's format or else Cohere's action blocks; "none": the text as generated.
  std::string output_parser = "auto";
};

class OpenAiService {
 public:
  // max_samples_per_request: prompts x n a request may ask for, refused with 400 beyond; 0: the larger of
  // kDefaultMaxSamplesPerRequest and the engine's max_num_seqs.
  OpenAiService(Engine& engine, ChatTemplates chat_templates, ChatSettings chat_settings,
                std::string served_model_name, std::string model_root, MetricsRegistry& metrics,
                int64_t max_samples_per_request = 0);
  ~OpenAiService();

  Engine& engine() { return engine_; }
  // refresh_engine_metrics, and the compiled constraints' counters.
  void refresh_metrics(MetricsRegistry& metrics) const;
  nlohmann::json models() const;
  GenerationJob prepare_completion(const CompletionRequest& request) const;
  // `shape`: kChat (OpenAI) or kCohereChat (/v2/chat).
  GenerationJob prepare_chat(const ChatRequest& request, ApiShape shape = ApiShape::kChat) const;
  nlohmann::json tokenize(const TokenizeRequest& request) const;
  nlohmann::json detokenize(const DetokenizeRequest& request) const;

  // Submits every prompt of `job`; throws ApiError 400 when the engine refuses one (none stays submitted).
  std::unique_ptr<GenerationRun> start(GenerationJob job);

 private:
  // A chat request rendered: the prompt's text and ids, and the output format its template asks for.
  struct RenderedChat {
    std::string text;
    std::vector<int32_t> ids;
    std::optional<CohereFormat> format;
  };

  template <typename Request>
  GenerationJob new_job(const Request& request, ApiShape shape) const;
  void check_model(const std::optional<std::string>& model) const;
  RenderedChat render_chat(const ChatRequest& request) const;
  // How `request`'s samples are parsed (null: not at all), and the options that go with it.
  void set_chat_output(GenerationJob& job, const ChatRequest& request, const RenderedChat& rendered) const;
  // Constrained decoding: the compiled-grammar cache (built in the background from the start: it reads the whole
  // vocabulary), a job's constraint, and a chat request's (forced or strict tool calls, or a response format).
  ConstraintCache& constraints() const;
  void set_constraint(GenerationJob& job, std::shared_ptr<const TokenConstraintSpec> spec, const std::string& field) const;
  void set_chat_constraint(GenerationJob& job, const ChatRequest& request) const;
  // Sets job.options.max_tokens from the request (or the default) and checks prompt + max_tokens.
  void fit_max_tokens(GenerationJob& job, const GenerationRequest& request, int64_t default_max_tokens) const;
  // Refuses a request of more than max_samples_per_request_ samples (prompts x n).
  void check_samples(size_t num_prompts, int n) const;

  Engine& engine_;
  ChatTemplates chat_templates_;  // empty: chat requests are refused
  ChatSettings chat_settings_;
  mutable std::mutex constraints_mutex_;
  mutable std::future<std::unique_ptr<ConstraintCache>> constraints_building_;
  mutable std::unique_ptr<ConstraintCache> constraints_;
  mutable std::string constraints_error_;  // why the vocabulary cannot be constrained, once known
  std::string served_model_name_;
  std::string model_root_;
  MetricsRegistry& metrics_;
  int64_t max_samples_per_request_;
};

}  // namespace tide::server

// OpenAiService: the OpenAI endpoints over a loaded Engine, without HTTP. prepare_*() check a parsed request
// against the model (served name, tokenization, the chat template, max_model_len) and throw ApiError; start()
// submits it; a GenerationRun gathers its deltas (from every prompt and sample) and turns them into the response
// (one JSON body, or streamed chunks). The HTTP layer only moves bytes and notices clients that went away.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
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
#include "server/sse.h"

namespace tide::server {

// A checked request, ready to submit.
struct GenerationJob {
  bool chat = false;
  std::string id;  // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;
  std::string model;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> echo_texts;  // per prompt when echo (completions)
  GenerateOptions options;
  bool stream = false;
  bool include_usage = false;
  bool return_tokens_as_token_ids = false;
  std::chrono::steady_clock::time_point arrival;
};

// Declares the metrics the service updates (request latencies and outcomes) and the engine gauges that
// refresh_engine_metrics() sets.
void declare_metrics(MetricsRegistry& metrics);
// Copies the engine's counters and pool statistics into `metrics` (called before each scrape).
void refresh_engine_metrics(const Engine& engine, MetricsRegistry& metrics);

class GenerationRun;

// The most samples (prompts x n) one request may ask for, unless the engine runs more requests at once.
inline constexpr int64_t kDefaultMaxSamplesPerRequest = 256;

class OpenAiService {
 public:
  // max_samples_per_request: prompts x n a request may ask for, refused with 400 beyond; 0: the larger of
  // kDefaultMaxSamplesPerRequest and the engine's max_num_seqs.
  OpenAiService(Engine& engine, std::optional<ChatTemplate> chat_template, std::string served_model_name,
                std::string model_root, MetricsRegistry& metrics, int64_t max_samples_per_request = 0);

  Engine& engine() { return engine_; }
  nlohmann::json models() const;
  GenerationJob prepare_completion(const CompletionRequest& request) const;
  GenerationJob prepare_chat(const ChatRequest& request) const;
  nlohmann::json tokenize(const TokenizeRequest& request) const;
  nlohmann::json detokenize(const DetokenizeRequest& request) const;

  // Submits every prompt of `job`; throws ApiError 400 when the engine refuses one (none stays submitted).
  std::unique_ptr<GenerationRun> start(GenerationJob job);

 private:
  template <typename Request>
  GenerationJob new_job(const Request& request, bool chat) const;
  void check_model(const std::optional<std::string>& model) const;
  std::vector<int32_t> render_chat(const ChatRequest& request) const;
  // Sets job.options.max_tokens from the request (or the default) and checks prompt + max_tokens.
  void fit_max_tokens(GenerationJob& job, const GenerationRequest& request, int64_t default_max_tokens) const;
  // Refuses a request of more than max_samples_per_request_ samples (prompts x n).
  void check_samples(size_t num_prompts, int n) const;

  Engine& engine_;
  std::optional<ChatTemplate> chat_template_;
  std::string served_model_name_;
  std::string model_root_;
  MetricsRegistry& metrics_;
  int64_t max_samples_per_request_;
};

// One submitted job: its handles and the deltas of all of them, in arrival order.
class GenerationRun {
 public:
  GenerationRun(GenerationJob job, const Engine& engine, MetricsRegistry& metrics);
  ~GenerationRun();  // cancels whatever has not finished

  const GenerationJob& job() const { return job_; }
  // Calls `notify` whenever a delta arrives (on the engine's thread; at once when deltas are already waiting).
  // Cheap and non-blocking, e.g. a post to an I/O loop.
  void set_notify(std::function<void()> notify);
  // Folds in the deltas that arrived (never waits); true once every sample has finished.
  bool advance();
  bool finished() const { return num_finished_ == num_choices(); }
  void cancel();

  // The whole response (after finished()): completion or chat.completion with usage.
  nlohmann::json response() const;
  // Streaming: the deltas that arrived, as server-sent events (without waiting); once every sample has finished,
  // the usage chunk (when asked for) and [DONE] end them and `done` turns true.
  std::string take_events(bool& done);
  // The error of a sample that ended with "error", if any.
  std::optional<std::string> error() const;

 private:
  friend class OpenAiService;
  struct Event {
    size_t prompt_idx;
    SampleDelta delta;
  };
  struct Queue {
    std::mutex mutex;
    std::deque<Event> events;
    std::function<void()> notify;
  };
  struct Choice {
    std::string text;
    std::vector<TokenLogprobs> logprobs;
    int64_t num_tokens = 0;
    std::string finish_reason;
    std::string error;
    bool started = false;  // first chunk (role / echo) sent
    std::chrono::steady_clock::time_point last_token;
  };

  int num_choices() const { return static_cast<int>(choices_.size()); }
  std::optional<Event> pop();  // the oldest delta that arrived, if any
  // Folds `event` into its choice and the metrics; returns the choice index.
  size_t apply(const Event& event);
  nlohmann::json usage() const;
  nlohmann::json chunk_json(size_t choice_idx, const SampleDelta& delta, bool first);
  nlohmann::json logprobs_json(const std::vector<TokenLogprobs>& logprobs, size_t text_offset) const;

  GenerationJob job_;
  const Engine& engine_;
  MetricsRegistry& metrics_;
  std::shared_ptr<Queue> queue_ = std::make_shared<Queue>();
  std::vector<std::shared_ptr<RequestHandle>> handles_;
  std::vector<Choice> choices_;
  std::vector<int64_t> cached_tokens_;  // per prompt
  int num_finished_ = 0;
  bool first_token_seen_ = false;
  bool done_sent_ = false;  // take_events() ended the stream
  bool refused_ = false;  // the engine refused a prompt at submission (a 400, not a finished request)
};

}  // namespace tide::server

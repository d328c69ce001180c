// GenerationRun: one submitted request's deltas, from every prompt and sample, gathered and turned into the
// response its API returns: OpenAI's completion or chat completion, or Cohere's v2 chat, as one JSON body or as
// server-sent events. Chat samples go through a ChatOutput each (reasoning, tool calls, citations).
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

#include "runtime/engine.h"
#include "server/chat_output.h"
#include "server/cohere_response.h"
#include "server/metrics.h"

namespace tide::server {

// The API a job answers in.
enum class ApiShape { kCompletion, kChat, kCohereChat };

// A checked request, ready to submit.
struct GenerationJob {
  ApiShape shape = ApiShape::kCompletion;
  bool chat() const { return shape != ApiShape::kCompletion; }
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
  // Chat: how samples are parsed (shared by them); include_reasoning: reasoning_content is returned.
  std::shared_ptr<const ChatOutputOptions> chat_output;
  bool include_reasoning = true;
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

  // The whole response (after finished()): completion, chat.completion with usage, or Cohere's chat response.
  nlohmann::json response() const;
  // Streaming: the deltas that arrived, as server-sent events (without waiting); once every sample has finished,
  // OpenAI's usage chunk (when asked for) and [DONE], or Cohere's message-end, end them and `done` turns true.
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
    FinishReason reason = FinishReason::kNone;
    std::string error;
    bool started = false;  // first chunk (role / echo) sent
    bool stopped_by_string = false;
    std::chrono::steady_clock::time_point last_token;
    std::unique_ptr<ChatOutput> output;  // chat: the text parsed
    ChatOutput::Delta parsed;            // chat: what the latest delta added
  };

  int num_choices() const { return static_cast<int>(choices_.size()); }
  std::optional<Event> pop();  // the oldest delta that arrived, if any
  // Folds `event` into its choice and the metrics; returns the choice index.
  size_t apply(const Event& event);
  nlohmann::json usage() const;
  // The finish reason a choice reports in OpenAI's API ("tool_calls" where the answer is tool calls).
  std::string openai_finish_reason(const Choice& c) const;
  nlohmann::json chat_message(const Choice& c) const;
  nlohmann::json chunk_json(size_t choice_idx, const SampleDelta& delta, bool first);
  // Cohere's events for the latest delta of the (only) choice.
  void cohere_events(const SampleDelta& delta, std::vector<nlohmann::ordered_json>& events);
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
  CohereStream cohere_stream_;  // kCohereChat streaming: which blocks are open
};

}  // namespace tide::server

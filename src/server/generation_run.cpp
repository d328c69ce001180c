#include "server/generation_run.h"

#include <cmath>

#include "core/error.h"
#include "server/api_error.h"
#include "server/cohere_protocol.h"
#include "server/sse.h"

namespace tide::server {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// OpenAI reports impossible tokens as -9999 (JSON has no -inf).
double finite_logprob(float value) { return std::isfinite(value) ? value : -9999.0; }

}  // namespace

GenerationRun::GenerationRun(GenerationJob job, const Engine& engine, MetricsRegistry& metrics)
    : job_(std::move(job)), engine_(engine), metrics_(metrics) {
  choices_.resize(job_.prompts.size() * static_cast<size_t>(job_.options.n));
  cached_tokens_.assign(job_.prompts.size(), 0);
  if (job_.chat_output) {
    for (Choice& c : choices_) c.output = std::make_unique<ChatOutput>(job_.chat_output);
  }
}

GenerationRun::~GenerationRun() {
  if (finished()) return;
  cancel();
  if (refused_) return;
  // The client went away (or the server is stopping): the samples end with "abort" after this run is gone.
  for (const Choice& c : choices_) {
    if (c.finish_reason.empty()) metrics_.increment("tide_request_success_total", 1, {{"finished_reason", "abort"}});
  }
}

void GenerationRun::cancel() {
  for (const auto& h : handles_) h->cancel();
}

void GenerationRun::set_notify(std::function<void()> notify) {
  bool waiting = false;
  {
    std::lock_guard lock(queue_->mutex);
    queue_->notify = notify;
    waiting = !queue_->events.empty();
  }
  if (waiting && notify) notify();
}

std::optional<GenerationRun::Event> GenerationRun::pop() {
  std::lock_guard lock(queue_->mutex);
  if (queue_->events.empty()) return std::nullopt;
  Event e = std::move(queue_->events.front());
  queue_->events.pop_front();
  return e;
}

bool GenerationRun::advance() {
  while (const std::optional<Event> e = pop()) apply(*e);
  return finished();
}

size_t GenerationRun::apply(const Event& event) {
  const SampleDelta& d = event.delta;
  const size_t idx = event.prompt_idx * static_cast<size_t>(job_.options.n) + static_cast<size_t>(d.index);
  TIDE_CHECK(idx < choices_.size());
  Choice& c = choices_[idx];
  const Clock::time_point now = Clock::now();
  if (!d.ids.empty()) {
    if (!first_token_seen_) metrics_.observe("tide_time_to_first_token_seconds", seconds(now - job_.arrival));
    first_token_seen_ = true;
    if (c.last_token != Clock::time_point{}) metrics_.observe("tide_inter_token_latency_seconds", seconds(now - c.last_token));
    c.last_token = now;
  }
  c.text += d.text;
  if (c.output) c.parsed = c.output->add(d.text, d.finished());
  c.logprobs.insert(c.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
  c.num_tokens += static_cast<int64_t>(d.ids.size());
  if (d.finished()) {
    c.finish_reason = to_string(d.finish_reason);
    c.reason = d.finish_reason;
    c.stopped_by_string = d.stopped_by_string;
    c.error = d.error;
    c.num_tokens = d.num_output_tokens;
    if (d.index == 0) cached_tokens_[event.prompt_idx] = d.cached_tokens;
    ++num_finished_;
    metrics_.increment("tide_request_success_total", 1, {{"finished_reason", c.finish_reason}});
    if (finished()) metrics_.observe("tide_e2e_request_latency_seconds", seconds(now - job_.arrival));
  }
  return idx;
}

std::optional<std::string> GenerationRun::error() const {
  for (const Choice& c : choices_) {
    if (c.finish_reason == "error") return c.error;
  }
  return std::nullopt;
}

json GenerationRun::usage() const {
  int64_t prompt_tokens = 0, completion_tokens = 0, cached = 0;
  for (const auto& p : job_.prompts) prompt_tokens += static_cast<int64_t>(p.size());
  for (const Choice& c : choices_) completion_tokens += c.num_tokens;
  for (int64_t t : cached_tokens_) cached += t;
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", cached}}}};
}

json GenerationRun::logprobs_json(const std::vector<TokenLogprobs>& logprobs, size_t text_offset) const {
  const Tokenizer& tok = engine_.tokenizer();
  auto token_text = [&](int32_t id) {
    return job_.return_tokens_as_token_ids ? "token_id:" + std::to_string(id)
                                           : tok.decode(std::vector<int32_t>{id}, /*skip_special_tokens=*/false);
  };
  if (job_.chat()) {
    auto entry = [&](int32_t id, float lp) {
      const std::string text = token_text(id);
      std::vector<int> bytes;
      for (unsigned char ch : text) bytes.push_back(ch);
      return json{{"token", text}, {"logprob", finite_logprob(lp)}, {"bytes", bytes}};
    };
    json content = json::array();
    for (const TokenLogprobs& t : logprobs) {
      json e = entry(t.id, t.logprob);
      e["top_logprobs"] = json::array();
      for (const auto& [id, lp] : t.top) e["top_logprobs"].push_back(entry(id, lp));
      content.push_back(std::move(e));
    }
    return {{"content", content}, {"refusal", nullptr}};
  }
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(), offsets = json::array();
  for (const TokenLogprobs& t : logprobs) {
    const std::string text = token_text(t.id);
    tokens.push_back(text);
    token_logprobs.push_back(finite_logprob(t.logprob));
    json alternatives = json::object();
    for (const auto& [id, lp] : t.top) alternatives[token_text(id)] = finite_logprob(lp);
    top.push_back(std::move(alternatives));
    offsets.push_back(text_offset);
    text_offset += text.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top}, {"text_offset", offsets}};
}

std::string GenerationRun::openai_finish_reason(const Choice& c) const {
  return c.finish_reason == "stop" && c.output && !c.output->tool_calls().empty() ? "tool_calls" : c.finish_reason;
}

json GenerationRun::chat_message(const Choice& c) const {
  if (!c.output) return {{"role", "assistant"}, {"content", c.text}};
  const ChatOutput& out = *c.output;
  json message = {{"role", "assistant"}};
  // OpenAI: content is null when the answer is only tool calls.
  message["content"] = out.content().empty() && !out.tool_calls().empty() ? json(nullptr) : json(out.content());
  if (job_.include_reasoning && !out.reasoning().empty()) message["reasoning_content"] = out.reasoning();
  if (!out.tool_calls().empty()) {
    json calls = json::array();
    for (const ToolCallOutput& call : out.tool_calls()) calls.push_back(json(tool_call_json(call)));
    message["tool_calls"] = std::move(calls);
  }
  if (!out.citations().empty()) message["citations"] = json(out.citations());
  return message;
}

json GenerationRun::response() const {
  if (job_.shape == ApiShape::kCohereChat) {
    const Choice& c = choices_.at(0);
    const bool calls = c.output && !c.output->tool_calls().empty();
    const json u = usage();
    return cohere_chat_response(job_.id, *c.output, job_.include_reasoning,
                                cohere_finish_reason(c.reason, c.stopped_by_string, calls),
                                cohere_usage(u["prompt_tokens"], u["completion_tokens"]));
  }
  json choices = json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    const size_t prompt_idx = i / static_cast<size_t>(job_.options.n);
    const std::string echo = job_.echo_texts.empty() ? std::string() : job_.echo_texts[prompt_idx];
    const json logprobs = job_.options.logprobs >= 0 ? logprobs_json(c.logprobs, echo.size()) : json(nullptr);
    if (job_.chat()) {
      choices.push_back({{"index", i},
                         {"message", chat_message(c)},
                         {"logprobs", logprobs},
                         {"finish_reason", openai_finish_reason(c)}});
    } else {
      choices.push_back({{"index", i},
                         {"text", echo + c.text},
                         {"logprobs", logprobs},
                         {"finish_reason", c.finish_reason},
                         {"stop_reason", nullptr}});
    }
  }
  return {{"id", job_.id},
          {"object", job_.chat() ? "chat.completion" : "text_completion"},
          {"created", job_.created},
          {"model", job_.model},
          {"choices", choices},
          {"usage", usage()}};
}

json GenerationRun::chunk_json(size_t choice_idx, const SampleDelta& delta, bool first) {
  Choice& c = choices_[choice_idx];
  const size_t prompt_idx = choice_idx / static_cast<size_t>(job_.options.n);
  json choice = {{"index", choice_idx}};
  const json finish = delta.finished() ? json(openai_finish_reason(c)) : json(nullptr);
  const size_t offset = c.text.size() - delta.text.size();
  const json logprobs = job_.options.logprobs >= 0 && !delta.logprobs.empty() ? logprobs_json(delta.logprobs, offset)
                                                                              : json(nullptr);
  if (job_.chat()) {
    json d = json::object();
    if (first) d["role"] = "assistant";
    if (!c.output) {
      if (!delta.text.empty() || first) d["content"] = delta.text;
    } else {
      const ChatOutput::Delta& p = c.parsed;
      if (!p.content.empty() || first) d["content"] = p.content;
      if (job_.include_reasoning && !p.reasoning.empty()) d["reasoning_content"] = p.reasoning;
      if (!p.tool_calls.empty()) {
        json calls = json::array();
        size_t index = c.output->tool_calls().size() - p.tool_calls.size();
        for (const ToolCallOutput& call : p.tool_calls) {
          json entry(tool_call_json(call));
          entry["index"] = index++;
          calls.push_back(std::move(entry));
        }
        d["tool_calls"] = std::move(calls);
      }
      if (!p.citations.empty()) d["citations"] = json(p.citations);
    }
    choice["delta"] = d;
  } else {
    const std::string echo = first && !job_.echo_texts.empty() ? job_.echo_texts[prompt_idx] : std::string();
    choice["text"] = echo + delta.text;
  }
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = finish;
  return {{"id", job_.id},
          {"object", job_.chat() ? "chat.completion.chunk" : "text_completion"},
          {"created", job_.created},
          {"model", job_.model},
          {"choices", json::array({choice})}};
}

void GenerationRun::cohere_events(const SampleDelta& delta, std::vector<nlohmann::ordered_json>& events) {
  const Choice& c = choices_.at(0);
  if (!c.started) events.push_back(cohere_stream_.message_start(job_.id));
  cohere_stream_.add(c.parsed, c.output->tools_requested(), job_.include_reasoning, events);
  if (delta.finished()) {
    const json u = usage();
    const bool calls = !c.output->tool_calls().empty();
    cohere_stream_.end(cohere_finish_reason(c.reason, c.stopped_by_string, calls),
                       cohere_usage(u["prompt_tokens"], u["completion_tokens"]), c.error, events);
  }
}

std::string GenerationRun::take_events(bool& done) {
  std::string out;
  SseWriter writer([&out](std::string_view bytes) {
    out += bytes;
    return true;
  });
  const bool cohere = job_.shape == ApiShape::kCohereChat;
  std::vector<nlohmann::ordered_json> events;
  while (!done_sent_) {
    const std::optional<Event> e = pop();
    if (!e) break;
    const size_t idx = apply(*e);
    Choice& c = choices_[idx];
    if (cohere) {
      events.clear();
      cohere_events(e->delta, events);
      c.started = true;
      for (const auto& event : events) out += sse_typed_event(event["type"].get<std::string>(), event);
      continue;
    }
    // A chat delta whose text the parser holds back (a marker, an action block) has nothing to send yet.
    const bool has_text = c.output ? !c.parsed.empty() : !e->delta.text.empty();
    const bool has_content = has_text || !e->delta.logprobs.empty() || e->delta.finished();
    if (!has_content && c.started) continue;
    const bool first = !c.started;
    c.started = true;
    writer.send(chunk_json(idx, e->delta, first));
    // A sample that failed: the reason as an error event (OpenAI's error object), before [DONE].
    if (e->delta.finish_reason == FinishReason::kError) {
      writer.send(error_json(ApiError(500, "generation failed (choice " + std::to_string(idx) + "): " + c.error, "",
                                      "internal_error")));
    }
  }
  if (finished() && !done_sent_) {
    if (cohere) {
      done_sent_ = true;  // message-end was the last event
    } else {
      if (job_.include_usage) {
        writer.send(json{{"id", job_.id},
                         {"object", job_.chat() ? "chat.completion.chunk" : "text_completion"},
                         {"created", job_.created},
                         {"model", job_.model},
                         {"choices", json::array()},
                         {"usage", usage()}});
      }
      writer.send_done();
      done_sent_ = true;
    }
  }
  done = done_sent_;
  return out;
}

}  // namespace tide::server

#include "server/openai_service.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "core/error.h"
#include "server/api_error.h"

namespace tide::server {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string random_id(const char* prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[40];
  std::snprintf(buf, sizeof buf, "%s%016llx", prefix, static_cast<unsigned long long>(rng()));
  return buf;
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// OpenAI reports impossible tokens as -9999 (JSON has no -inf).
double finite_logprob(float value) { return std::isfinite(value) ? value : -9999.0; }

std::string window_label(int64_t window) { return window == 0 ? std::string("global") : std::to_string(window); }

const std::vector<double> kLatencyBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5,
                                             0.75,  1.0,    2.5,   5.0,  7.5,   10.0, 20.0,  40.0, 80.0};

}  // namespace

// --- metrics

void declare_metrics(MetricsRegistry& m) {
  m.add_gauge("tide_num_requests_running", "Samples being computed (holding KV blocks).");
  m.add_gauge("tide_num_requests_waiting", "Samples waiting to be admitted (new or preempted).");
  m.add_gauge("tide_kv_cache_usage_ratio", "Fraction of the KV arena's blocks in use (0..1).");
  m.add_gauge("tide_kv_cache_blocks_capacity", "Blocks of the KV arena, shared by every layer group.");
  m.add_gauge("tide_kv_cache_blocks_in_use", "KV blocks referenced by running requests, per layer group.");
  m.add_gauge("tide_kv_cache_blocks_cached", "Free KV blocks still holding a reusable prefix, per layer group.");
  m.add_gauge("tide_kv_cache_blocks_host", "Host-tier slots holding a reusable prefix, per layer group.");
  m.add_counter("tide_prefix_cache_queries_total", "Blocks looked up for prefix reuse, per layer group.");
  m.add_counter("tide_prefix_cache_hits_total", "Blocks reused from the prefix cache, per layer group.");
  m.add_counter("tide_prompt_tokens_total", "Prompt tokens computed (a reused prefix is not computed).");
  m.add_counter("tide_generation_tokens_total", "Tokens generated.");
  m.add_counter("tide_num_preemptions_total", "Times a running request gave its blocks back to be recomputed.");
  m.add_counter("tide_request_success_total", "Samples finished, by finish reason.");
  m.add_histogram("tide_time_to_first_token_seconds", "From arrival to the first generated token.", kLatencyBuckets);
  m.add_histogram("tide_inter_token_latency_seconds", "Between consecutive token deliveries of a sample.",
                  kLatencyBuckets);
  m.add_histogram("tide_e2e_request_latency_seconds", "From arrival to the last sample's end.", kLatencyBuckets);
}

void refresh_engine_metrics(const Engine& engine, MetricsRegistry& m) {
  const EngineStats s = engine.stats();
  m.set("tide_num_requests_running", static_cast<double>(s.num_running));
  m.set("tide_num_requests_waiting", static_cast<double>(s.num_waiting));
  m.set("tide_prompt_tokens_total", static_cast<double>(s.prompt_tokens));
  m.set("tide_generation_tokens_total", static_cast<double>(s.generation_tokens));
  m.set("tide_num_preemptions_total", static_cast<double>(s.num_preemptions));
  const KvReport kv = engine.kv_report();
  const ArenaStats& a = kv.arena;
  m.set("tide_kv_cache_usage_ratio", a.capacity_blocks == 0 ? 0.0 : double(a.in_use_blocks) / a.capacity_blocks);
  m.set("tide_kv_cache_blocks_capacity", a.capacity_blocks);
  for (size_t g = 0; g < kv.groups.size(); ++g) {
    const KvGroupReport& r = kv.groups[g];
    const Labels group{{"group", std::to_string(g)}, {"window", window_label(r.window)}};
    const GroupStats& p = r.stats;
    m.set("tide_kv_cache_blocks_in_use", p.in_use_blocks, group);
    m.set("tide_kv_cache_blocks_cached", p.cached_blocks, group);
    m.set("tide_kv_cache_blocks_host", p.host_blocks, group);
    m.set("tide_prefix_cache_queries_total", static_cast<double>(p.queries), group);
    m.set("tide_prefix_cache_hits_total", static_cast<double>(p.hits), group);
  }
}

// --- OpenAiService

OpenAiService::OpenAiService(Engine& engine, std::optional<ChatTemplate> chat_template, std::string served_model_name,
                             std::string model_root, MetricsRegistry& metrics, int64_t max_samples_per_request)
    : engine_(engine),
      chat_template_(std::move(chat_template)),
      served_model_name_(std::move(served_model_name)),
      model_root_(std::move(model_root)),
      metrics_(metrics),
      max_samples_per_request_(max_samples_per_request > 0
                                   ? max_samples_per_request
                                   : std::max(kDefaultMaxSamplesPerRequest, engine.options().max_num_seqs)) {}

json OpenAiService::models() const {
  return {{"object", "list"},
          {"data",
           {{{"id", served_model_name_},
             {"object", "model"},
             {"created", unix_now()},
             {"owned_by", "tide"},
             {"root", model_root_},
             {"parent", nullptr},
             {"max_model_len", engine_.max_model_len()},
             {"vocab_size", engine_.config().vocab_size}}}}};
}

void OpenAiService::check_model(const std::optional<std::string>& model) const {
  if (model && *model != served_model_name_) {
    throw ApiError(404, "The model `" + *model + "` does not exist.", "model", "NotFoundError");
  }
}

void OpenAiService::fit_max_tokens(GenerationJob& job, const GenerationRequest& request,
                                   int64_t default_max_tokens) const {
  const int64_t limit = engine_.max_model_len();
  const char* what = job.chat ? "messages" : "prompt";
  int64_t longest = 0;
  for (const auto& p : job.prompts) longest = std::max<int64_t>(longest, static_cast<int64_t>(p.size()));
  if (longest >= limit) {
    bad_request(what, "This model's maximum context length is " + std::to_string(limit) + " tokens. However, your " +
                          what + " has " + std::to_string(longest) + " tokens, leaving no room for the completion.");
  }
  const int64_t max_tokens = request.max_tokens.value_or(default_max_tokens > 0 ? default_max_tokens : limit - longest);
  if (longest + max_tokens > limit) {
    bad_request("max_tokens", "This model's maximum context length is " + std::to_string(limit) +
                                  " tokens. However, you requested " + std::to_string(longest + max_tokens) +
                                  " tokens (" + std::to_string(longest) + " in the " + what + ", " +
                                  std::to_string(max_tokens) + " in the completion). Please reduce the length of the " +
                                  what + " or completion.");
  }
  job.options.max_tokens = max_tokens;
}

void OpenAiService::check_samples(size_t num_prompts, int n) const {
  const int64_t samples = static_cast<int64_t>(num_prompts) * n;
  if (samples > max_samples_per_request_) {
    bad_request("n", "this request asks for " + std::to_string(samples) + " samples (" + std::to_string(num_prompts) +
                         " prompts x n = " + std::to_string(n) +
                         "); a request may ask for at most " + std::to_string(max_samples_per_request_));
  }
}

// The fields every job takes from its request (completions and chat share them), after checking the model.
template <typename Request>
GenerationJob OpenAiService::new_job(const Request& request, bool chat) const {
  check_model(request.model);
  GenerationJob job;
  job.chat = chat;
  job.id = random_id(chat ? "chatcmpl-" : "cmpl-");
  job.created = unix_now();
  job.model = served_model_name_;
  job.options = request.options;
  job.stream = request.stream;
  job.include_usage = request.include_usage;
  job.return_tokens_as_token_ids = request.return_tokens_as_token_ids;
  job.arrival = Clock::now();
  return job;
}

GenerationJob OpenAiService::prepare_completion(const CompletionRequest& request) const {
  GenerationJob job = new_job(request, /*chat=*/false);
  check_samples(request.prompts.size(), job.options.n);  // before tokenizing them
  const Tokenizer& tok = engine_.tokenizer();
  for (const PromptInput& p : request.prompts) {
    std::vector<int32_t> ids = p.text ? tok.encode(*p.text, /*add_special_tokens=*/true) : p.ids;
    if (ids.empty()) bad_request("prompt", "the prompt is empty");
    for (int32_t id : ids) {
      if (id >= tok.vocab_size()) {
        bad_request("prompt", "token id " + std::to_string(id) + " is outside the vocabulary (size " +
                                  std::to_string(tok.vocab_size()) + ")");
      }
    }
    if (request.echo) job.echo_texts.push_back(p.text ? *p.text : tok.decode(ids, job.options.skip_special_tokens));
    job.prompts.push_back(std::move(ids));
  }
  fit_max_tokens(job, request, kDefaultCompletionMaxTokens);
  return job;
}

std::vector<int32_t> OpenAiService::render_chat(const ChatRequest& request) const {
  if (!chat_template_) {
    bad_request("messages", "the model has no chat template; start the server with --chat-template FILE");
  }
  ChatTemplateInputs inputs;
  inputs.messages = request.messages;
  inputs.add_generation_prompt = request.add_generation_prompt;
  inputs.tools = request.tools;
  inputs.documents = request.documents;
  inputs.extra = request.chat_template_kwargs;
  std::string text;
  try {
    text = chat_template_->render(inputs);
  } catch (const std::exception& e) {
    bad_request("messages", std::string("the chat template failed: ") + e.what());
  }
  return engine_.tokenizer().encode(text, /*add_special_tokens=*/false);
}

GenerationJob OpenAiService::prepare_chat(const ChatRequest& request) const {
  GenerationJob job = new_job(request, /*chat=*/true);
  job.prompts.push_back(render_chat(request));
  if (job.prompts[0].empty()) bad_request("messages", "the chat template rendered an empty prompt");
  check_samples(1, job.options.n);
  fit_max_tokens(job, request, /*default: the rest of max_model_len*/ 0);
  return job;
}

json OpenAiService::tokenize(const TokenizeRequest& request) const {
  check_model(request.model);
  std::vector<int32_t> ids;
  if (request.chat) {
    ids = render_chat(*request.chat);
    if (request.add_special_tokens) {
      // The rendered text already holds the template's special tokens; add BOS only when it is missing.
      const std::optional<int32_t> bos = engine_.tokenizer().bos_id();
      if (bos && (ids.empty() || ids[0] != *bos)) ids.insert(ids.begin(), *bos);
    }
  } else {
    ids = engine_.tokenizer().encode(*request.prompt, request.add_special_tokens);
  }
  return {{"count", ids.size()}, {"max_model_len", engine_.max_model_len()}, {"tokens", ids}};
}

json OpenAiService::detokenize(const DetokenizeRequest& request) const {
  check_model(request.model);
  const Tokenizer& tok = engine_.tokenizer();
  for (int32_t id : request.tokens) {
    if (id >= tok.vocab_size()) bad_request("tokens", "token id " + std::to_string(id) + " is outside the vocabulary");
  }
  return {{"prompt", tok.decode(request.tokens, /*skip_special_tokens=*/false)}};
}

std::unique_ptr<GenerationRun> OpenAiService::start(GenerationJob job) {
  auto run = std::make_unique<GenerationRun>(std::move(job), engine_, metrics_);
  const GenerationJob& j = run->job();
  for (size_t p = 0; p < j.prompts.size(); ++p) {
    GenerateOptions options = j.options;
    // Names the request in the engine's log as the client sees it.
    options.request_id = j.prompts.size() == 1 ? j.id : fmt::format("{} prompt {}", j.id, p);
    std::weak_ptr<GenerationRun::Queue> queue = run->queue_;
    DeltaCallback on_delta = [queue, p](SampleDelta&& delta) {
      const std::shared_ptr<GenerationRun::Queue> q = queue.lock();
      if (!q) return;
      std::function<void()> notify;
      {
        std::lock_guard lock(q->mutex);
        q->events.push_back({p, std::move(delta)});
        notify = q->notify;
      }
      if (notify) notify();
    };
    try {
      run->handles_.push_back(engine_.submit(j.prompts[p], std::move(options), std::move(on_delta)));
    } catch (const Error& e) {
      run->refused_ = true;  // not a finished request: nothing to count
      bad_request(j.chat ? "messages" : "prompt", e.what());  // ~GenerationRun cancels the ones submitted
    }
  }
  return run;
}

// --- GenerationRun

GenerationRun::GenerationRun(GenerationJob job, const Engine& engine, MetricsRegistry& metrics)
    : job_(std::move(job)), engine_(engine), metrics_(metrics) {
  choices_.resize(job_.prompts.size() * static_cast<size_t>(job_.options.n));
  cached_tokens_.assign(job_.prompts.size(), 0);
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
  c.logprobs.insert(c.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
  c.num_tokens += static_cast<int64_t>(d.ids.size());
  if (d.finished()) {
    c.finish_reason = to_string(d.finish_reason);
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
  if (job_.chat) {
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

json GenerationRun::response() const {
  json choices = json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    const size_t prompt_idx = i / static_cast<size_t>(job_.options.n);
    const std::string echo = job_.echo_texts.empty() ? std::string() : job_.echo_texts[prompt_idx];
    const json logprobs = job_.options.logprobs >= 0 ? logprobs_json(c.logprobs, echo.size()) : json(nullptr);
    if (job_.chat) {
      choices.push_back({{"index", i},
                         {"message", {{"role", "assistant"}, {"content", c.text}}},
                         {"logprobs", logprobs},
                         {"finish_reason", c.finish_reason}});
    } else {
      choices.push_back({{"index", i},
                         {"text", echo + c.text},
                         {"logprobs", logprobs},
                         {"finish_reason", c.finish_reason},
                         {"stop_reason", nullptr}});
    }
  }
  return {{"id", job_.id},
          {"object", job_.chat ? "chat.completion" : "text_completion"},
          {"created", job_.created},
          {"model", job_.model},
          {"choices", choices},
          {"usage", usage()}};
}

json GenerationRun::chunk_json(size_t choice_idx, const SampleDelta& delta, bool first) {
  Choice& c = choices_[choice_idx];
  const size_t prompt_idx = choice_idx / static_cast<size_t>(job_.options.n);
  json choice = {{"index", choice_idx}};
  const json finish = delta.finished() ? json(c.finish_reason) : json(nullptr);
  const size_t offset = c.text.size() - delta.text.size();
  const json logprobs = job_.options.logprobs >= 0 && !delta.logprobs.empty() ? logprobs_json(delta.logprobs, offset)
                                                                              : json(nullptr);
  if (job_.chat) {
    json d = json::object();
    if (first) d["role"] = "assistant";
    if (!delta.text.empty() || first) d["content"] = delta.text;
    choice["delta"] = d;
  } else {
    const std::string echo = first && !job_.echo_texts.empty() ? job_.echo_texts[prompt_idx] : std::string();
    choice["text"] = echo + delta.text;
  }
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = finish;
  return {{"id", job_.id},
          {"object", job_.chat ? "chat.completion.chunk" : "text_completion"},
          {"created", job_.created},
          {"model", job_.model},
          {"choices", json::array({choice})}};
}

std::string GenerationRun::take_events(bool& done) {
  std::string out;
  SseWriter writer([&out](std::string_view bytes) {
    out += bytes;
    return true;
  });
  while (!done_sent_) {
    const std::optional<Event> e = pop();
    if (!e) break;
    const size_t idx = apply(*e);
    Choice& c = choices_[idx];
    const bool has_content = !e->delta.text.empty() || !e->delta.logprobs.empty() || e->delta.finished();
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
    if (job_.include_usage) {
      writer.send(json{{"id", job_.id},
                       {"object", job_.chat ? "chat.completion.chunk" : "text_completion"},
                       {"created", job_.created},
                       {"model", job_.model},
                       {"choices", json::array()},
                       {"usage", usage()}});
    }
    writer.send_done();
    done_sent_ = true;
  }
  done = done_sent_;
  return out;
}

}  // namespace tide::server

#include "server/openai_service.h"

#include <algorithm>
#include <cmath>
#include <random>

#include <fmt/ranges.h>

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
  m.add_counter("tide_spec_decode_num_draft_tokens_total", "Tokens drafted by speculative decoding and verified.");
  m.add_counter("tide_spec_decode_num_accepted_tokens_total", "Drafted tokens accepted (the target agreed).");
  m.add_counter("tide_spec_decode_num_drafts_total", "Verifications: one per request and step that had drafts.");
  m.add_counter("tide_spec_decode_num_draft_tokens_per_pos",
                "Drafted tokens verified at each draft position (0: a verification's first drafted token).");
  m.add_counter("tide_spec_decode_num_accepted_tokens_per_pos",
                "Drafted tokens accepted at each draft position (0: a verification's first drafted token).");
  m.add_counter("tide_request_success_total", "Samples finished, by finish reason.");
  m.add_counter("tide_grammar_compilations_total", "Output constraints (schemas, regexes, grammars, tool sets) compiled.");
  m.add_counter("tide_grammar_cache_hits_total", "Constrained requests that found their constraint compiled.");
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
  m.set("tide_spec_decode_num_draft_tokens_total", static_cast<double>(s.spec_draft_tokens));
  m.set("tide_spec_decode_num_accepted_tokens_total", static_cast<double>(s.spec_accepted_tokens));
  m.set("tide_spec_decode_num_drafts_total", static_cast<double>(s.spec_verifies));
  for (size_t i = 0; i < s.spec_draft_tokens_per_position.size(); ++i) {
    const Labels position{{"position", std::to_string(i)}};
    m.set("tide_spec_decode_num_draft_tokens_per_pos", static_cast<double>(s.spec_draft_tokens_per_position[i]),
          position);
    m.set("tide_spec_decode_num_accepted_tokens_per_pos",
          static_cast<double>(s.spec_accepted_tokens_per_position[i]), position);
  }
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

OpenAiService::OpenAiService(Engine& engine, ChatTemplates chat_templates, ChatSettings chat_settings,
                             std::string served_model_name, std::string model_root, MetricsRegistry& metrics,
                             int64_t max_samples_per_request)
    : engine_(engine),
      chat_templates_(std::move(chat_templates)),
      chat_settings_(std::move(chat_settings)),
      served_model_name_(std::move(served_model_name)),
      model_root_(std::move(model_root)),
      metrics_(metrics),
      max_samples_per_request_(max_samples_per_request > 0
                                   ? max_samples_per_request
                                   : std::max(kDefaultMaxSamplesPerRequest, engine.options().max_num_seqs)) {
  // The constraint cache reads the whole vocabulary (seconds for 256K tokens): built in the background from the
  // start, so that the first constrained request does not wait for it (it waits only if it comes sooner).
  constraints_building_ = std::async(std::launch::async, [&engine] {
    return std::make_unique<ConstraintCache>(engine.tokenizer(), engine.stop_token_ids());
  });
}

OpenAiService::~OpenAiService() {
  if (constraints_building_.valid()) constraints_building_.wait();
}

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
  const char* what = job.chat() ? "messages" : "prompt";
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
GenerationJob OpenAiService::new_job(const Request& request, ApiShape shape) const {
  check_model(request.model);
  GenerationJob job;
  job.shape = shape;
  job.id = random_id(shape == ApiShape::kCompletion ? "cmpl-" : "chatcmpl-");
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
  GenerationJob job = new_job(request, ApiShape::kCompletion);
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
  if (request.structured) set_constraint(job, constraints().structured(*request.structured, ConstraintFrame::kPlain), request.structured->field);
  return job;
}

void OpenAiService::refresh_metrics(MetricsRegistry& m) const {
  refresh_engine_metrics(engine_, m);
  std::unique_lock lock(constraints_mutex_, std::try_to_lock);  // a scrape never waits for the vocabulary
  if (!lock.owns_lock() || !constraints_) return;
  const ConstraintCache::Stats s = constraints_->stats();
  m.set("tide_grammar_compilations_total", static_cast<double>(s.compiled));
  m.set("tide_grammar_cache_hits_total", static_cast<double>(s.hits));
}

ConstraintCache& OpenAiService::constraints() const {
  std::lock_guard lock(constraints_mutex_);
  if (!constraints_) {
    if (!constraints_error_.empty()) throw ApiError(400, constraints_error_);
    try {
      constraints_ = constraints_building_.get();
    } catch (const std::exception& e) {
      constraints_error_ = std::string("this model's vocabulary cannot be constrained: ") + e.what();
      throw ApiError(400, constraints_error_);
    }
  }
  return *constraints_;
}

void OpenAiService::set_constraint(GenerationJob& job, std::shared_ptr<const TokenConstraintSpec> spec,
                                   const std::string& field) const {
  // A constrained output ends where its grammar allows an end: without the end-of-sequence token it never would.
  if (job.options.ignore_eos) bad_request(field, "an output constraint cannot be combined with 'ignore_eos'");
  job.options.constraint = std::move(spec);
}

void OpenAiService::set_chat_constraint(GenerationJob& job, const ChatRequest& request) const {
  const bool tools = !request.tools.is_null() && request.tool_choice != "none";
  const bool forced = request.tool_choice == "required" || request.tool_choice == "function";
  const bool cohere = job.chat_output && job.chat_output->format.has_value();
  if (tools && (forced || request.strict_tools || !request.parallel_tool_calls)) {
    const char* field = forced ? "tool_choice" : request.parallel_tool_calls ? "tools" : "parallel_tool_calls";
    if (request.structured) {
      bad_request(request.structured->field, "a response format and constrained tool calls cannot be combined");
    }
    if (!cohere) bad_request(field, "constrained tool calls need a chat template in Cohere's tool-use format");
    const std::optional<std::string> name =
        request.tool_choice == "function" ? std::optional<std::string>(request.tool_choice_function) : std::nullopt;
    set_constraint(job, constraints().tool_calls(request.tools, name, !request.parallel_tool_calls, !forced, field), field);
    return;
  }
  if (request.structured) {
    const ConstraintFrame frame = cohere ? ConstraintFrame::kCohereResponse : ConstraintFrame::kPlain;
    set_constraint(job, constraints().structured(*request.structured, frame), request.structured->field);
  }
}

OpenAiService::RenderedChat OpenAiService::render_chat(const ChatRequest& request) const {
  if (chat_templates_.empty()) {
    bad_request("messages", "the model has no chat template; start the server with --chat-template FILE");
  }
  // tool_choice "none": the model is not offered the tools (and the template is chosen as without them).
  const bool tools = !request.tools.is_null() && request.tool_choice != "none";
  const bool documents = !request.documents.is_null() && !request.documents.empty();
  RenderedChat rendered;
  std::optional<ChatTemplate> from_request;
  const ChatTemplate* chat_template = nullptr;
  if (request.chat_template && chat_templates_.find(*request.chat_template) == nullptr &&
      !chat_settings_.trust_request_chat_template) {
    bad_request("chat_template", fmt::format("'chat_template' must name one of the model's chat templates ({}); Jinja "
                                             "text is accepted only with --trust-request-chat-template",
                                             fmt::join(chat_templates_.names(), ", ")));
  }
  try {
    if (request.chat_template && chat_templates_.find(*request.chat_template) == nullptr) {
      chat_template = &from_request.emplace(chat_templates_.compile(*request.chat_template));
    } else {
      chat_template = &chat_templates_.select(request.chat_template, tools, documents);
    }
  } catch (const Error& e) {
    bad_request("chat_template", e.what());
  }
  rendered.format = cohere_format_of_template(chat_template->source());
  ChatTemplateInputs inputs;
  inputs.messages = request.messages;
  inputs.add_generation_prompt = request.add_generation_prompt;
  if (tools) inputs.tools = request.tools;
  inputs.documents = request.documents;
  inputs.extra = request.chat_template_kwargs;
  try {
    rendered.text = chat_template->render(inputs);
  } catch (const std::exception& e) {
    bad_request("messages", std::string("the chat template failed: ") + e.what());
  }
  rendered.ids = engine_.tokenizer().encode(rendered.text, /*add_special_tokens=*/false);
  return rendered;
}

void OpenAiService::set_chat_output(GenerationJob& job, const ChatRequest& request, const RenderedChat& rendered) const {
  job.include_reasoning = request.include_reasoning;
  std::optional<CohereFormat> format;
  if (chat_settings_.output_parser != "none") format = rendered.format;
  if (!format && chat_settings_.output_parser == "cohere") format = CohereFormat::kActions;
  auto options = std::make_shared<ChatOutputOptions>();
  options->format = format;
  if (format) {
    // The markers are text to the parser, which removes them.
    job.options.skip_special_tokens = false;
    options->parse.tool_calls = !request.tools.is_null() && request.tool_choice != "none";
    options->parse.reasoning = true;
    options->parse.citations = request.citations;
    constexpr std::string_view kOpenThinking = "<|START_THINKING|>";
    options->parse.starts_in_thinking = rendered.text.ends_with(kOpenThinking);
  } else if (request.citations) {
    bad_request("chat_template_kwargs", "citations need a chat template in Cohere's format (enable_citations)");
  }
  options->tools_requested = !request.tools.is_null() && request.tool_choice != "none";
  options->messages = request.messages;
  options->documents = request.citation_documents.is_null() ? request.documents : request.citation_documents;
  job.chat_output = std::move(options);
  if (request.thinking_budget) {
    const Tokenizer& tok = engine_.tokenizer();
    const std::optional<int32_t> open = tok.token_to_id("<|START_THINKING|>");
    const std::optional<int32_t> close = tok.token_to_id("<|END_THINKING|>");
    if (!open || !close) {
      bad_request("thinking_budget", "a thinking budget needs a vocabulary with <|START_THINKING|> and <|END_THINKING|>");
    }
    job.options.thinking_budget = SpanBudget{*open, *close, *request.thinking_budget};
  }
}

GenerationJob OpenAiService::prepare_chat(const ChatRequest& request, ApiShape shape) const {
  GenerationJob job = new_job(request, shape);
  if (shape == ApiShape::kCohereChat) job.id = random_id("");
  const RenderedChat rendered = render_chat(request);
  job.prompts.push_back(rendered.ids);
  if (job.prompts[0].empty()) bad_request("messages", "the chat template rendered an empty prompt");
  check_samples(1, job.options.n);
  set_chat_output(job, request, rendered);
  fit_max_tokens(job, request, /*default: the rest of max_model_len*/ 0);
  set_chat_constraint(job, request);
  return job;
}

json OpenAiService::tokenize(const TokenizeRequest& request) const {
  check_model(request.model);
  std::vector<int32_t> ids;
  json out;
  if (request.chat) {
    RenderedChat rendered = render_chat(*request.chat);
    ids = std::move(rendered.ids);
    if (request.add_special_tokens) {
      // The rendered text already holds the template's special tokens; add BOS only when it is missing.
      const std::optional<int32_t> bos = engine_.tokenizer().bos_id();
      if (bos && (ids.empty() || ids[0] != *bos)) ids.insert(ids.begin(), *bos);
    }
    out["prompt"] = std::move(rendered.text);  // what the template rendered, to debug templates with
  } else {
    ids = engine_.tokenizer().encode(*request.prompt, request.add_special_tokens);
  }
  out["count"] = ids.size();
  out["max_model_len"] = engine_.max_model_len();
  out["tokens"] = ids;
  return out;
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
      bad_request(j.chat() ? "messages" : "prompt", e.what());  // ~GenerationRun cancels the ones submitted
    }
  }
  return run;
}

}  // namespace tide::server

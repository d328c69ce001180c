// tide serve MODEL_DIR: the OpenAI-compatible HTTP server (src/server), with vLLM's flag names. SIGINT and
// SIGTERM stop it gracefully; a model that fails to load exits with status 1 and the reason.
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <thread>

#include "apps/tide/cli_util.h"
#include "apps/tide/commands.h"
#include "core/error.h"
#include "server/http_server.h"

namespace tide::cli {
namespace {

struct ServeArgs {
  std::string model;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string served_model_name;
  std::string api_key;
  std::string chat_template;
  bool trust_request_chat_template = false;
  std::string chat_output_parser = "auto";
  bool protect_metrics = false;
  int max_connections = 16384;
  int64_t max_pending_samples = 4096;
  double drain_timeout = 30;
  double timeout_keep_alive = 5;
  double timeout_request_header = 10;
  double timeout_request_body = 60;
  EngineFlags engine;
};

std::chrono::milliseconds to_ms(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

int g_signal_pipe[2] = {-1, -1};

extern "C" void on_stop_signal(int) {
  const int saved = errno;
  const char stop = 's';
  [[maybe_unused]] const ssize_t n = write(g_signal_pipe[1], &stop, 1);
  errno = saved;
}

void run_serve(const ServeArgs& args, const BackendWrapper& wrap) {
  EngineOptions options = engine_options(args.engine);
  options.load_progress = server::load_progress_printer();

  server::ServerOptions so;
  so.host = args.host;
  so.port = args.port;
  so.model_dir = args.model;
  so.served_model_name = args.served_model_name;
  so.api_key = args.api_key;
  if (!args.chat_template.empty()) so.chat_template = args.chat_template;
  so.chat.trust_request_chat_template = args.trust_request_chat_template;
  so.chat.output_parser = args.chat_output_parser;
  so.metrics_need_api_key = args.protect_metrics;
  so.max_connections = args.max_connections;
  so.max_pending_samples = args.max_pending_samples;
  so.drain_timeout = to_ms(args.drain_timeout);
  so.limits.idle = to_ms(args.timeout_keep_alive);
  so.limits.header = to_ms(args.timeout_request_header);
  so.limits.body = to_ms(args.timeout_request_body);

  // SIGINT / SIGTERM write to a pipe (the handler may run on any thread, OpenBLAS' included, so the signals
  // cannot simply be blocked and waited for); a watcher thread reads it and asks the server to stop. A client
  // that goes away must not kill the process (SIGPIPE).
  std::signal(SIGPIPE, SIG_IGN);
  if (pipe(g_signal_pipe) != 0) fail("cannot create a pipe for signal handling");
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);

  const std::string device = args.engine.device;
  // The server logs a load failure; its message names the flags, as the other commands' errors do.
  server::HttpServer server(so, [model = args.model, device, options, wrap] {
    try {
      std::unique_ptr<Backend> backend = make_backend(device);
      if (wrap) backend = wrap(std::move(backend), model);
      return std::make_unique<Engine>(model, std::move(backend), options);
    } catch (const Error& e) {
      throw Error(with_flag_names(e.what()));
    }
  });
  // The first signal drains, a second one stops at once.
  std::thread watcher([&] {
    for (;;) {
      char byte = 0;
      const ssize_t n = read(g_signal_pipe[0], &byte, 1);
      if (n < 0 && errno == EINTR) continue;
      if (n != 1 || byte != 's') return;
      server.stop();
    }
  });
  const int status = server.run();
  const char done = 'q';  // wakes the watcher when run() returned by itself (the model failed to load)
  if (write(g_signal_pipe[1], &done, 1) != 1) std::abort();
  watcher.join();
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  if (status != 0) fail("the server stopped with an error (see the log above)");
}

}  // namespace

void add_serve_command(CLI::App& app, BackendWrapper wrap) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API");
  cmd->add_option("model", args->model, "Hugging Face model folder (config.json, *.safetensors, tokenizer.json)")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--host", args->host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", args->port, "Port to listen on (0: any free port, logged)")
      ->capture_default_str()
      ->check(integer_in(0, 65535));
  cmd->add_option("--served-model-name", args->served_model_name,
                  "The model name requests must use (default: MODEL as given)");
  cmd->add_option("--api-key", args->api_key,
                  "Require 'Authorization: Bearer KEY' on every endpoint but /health and /metrics");
  cmd->add_flag("--protect-metrics", args->protect_metrics, "Require the API key on /metrics too");
  cmd->add_option("--max-connections", args->max_connections,
                  "Open connections at most; beyond, new connections are closed at once")
      ->capture_default_str()
      ->check(integer_in(1, 1 << 20));
  cmd->add_option("--max-pending-samples", args->max_pending_samples,
                  "Samples (prompts x n) running or waiting at most; beyond, requests get 429 with Retry-After")
      ->capture_default_str()
      ->check(integer_in(1, int64_t{1} << 30));
  cmd->add_option("--drain-timeout", args->drain_timeout,
                  "Seconds running requests may take to finish after SIGTERM / SIGINT; then they end with "
                  "finish_reason \"abort\" (a second signal: at once)")
      ->capture_default_str()
      ->check(number_in(0, 86400, /*min_exclusive=*/true));
  cmd->add_option("--timeout-keep-alive", args->timeout_keep_alive,
                  "Seconds an idle kept-alive connection may wait for its next request")
      ->capture_default_str()
      ->check(number_in(0, 86400, /*min_exclusive=*/true));
  cmd->add_option("--timeout-request-header", args->timeout_request_header,
                  "Seconds a client may take to send a request's header")
      ->capture_default_str()
      ->check(number_in(0, 86400, /*min_exclusive=*/true));
  cmd->add_option("--timeout-request-body", args->timeout_request_body,
                  "Seconds a client may take to send a request's body")
      ->capture_default_str()
      ->check(number_in(0, 86400, /*min_exclusive=*/true));
  cmd->add_option("--chat-template", args->chat_template,
                  "A Jinja file replacing the model's chat templates (all of them, named ones included)")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--trust-request-chat-template", args->trust_request_chat_template,
                "Accept Jinja text in a request's 'chat_template' (without it: only the names of the model's "
                "templates)");
  cmd->add_option("--chat-output-parser", args->chat_output_parser,
                  "How chat output is parsed into reasoning_content, tool_calls and citations: auto (when the chat "
                  "template is in Cohere's format), cohere (always), none (the text as generated)")
      ->capture_default_str()
      ->check(one_of({"auto", "cohere", "none"}));
  add_engine_flags(cmd, args->engine);
  cmd->callback([args, wrap] { run_serve(*args, wrap); });
}

}  // namespace tide::cli

#include "server/http_server.h"

#include <httplib.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>

#include <sys/socket.h>
#include <unistd.h>
#include <thread>

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "server/api_error.h"
#include "server/openai_protocol.h"
#include "server/openai_service.h"
#include "server/sse.h"

#ifndef TIDE_VERSION
#define TIDE_VERSION "unknown"
#endif

namespace tide::server {

using nlohmann::json;
using namespace std::chrono_literals;

void log_line(const std::string& line) {
  static std::mutex mutex;
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &tm);
  std::lock_guard lock(mutex);
  std::fprintf(stderr, "%s tide serve: %s\n", stamp, line.c_str());
  std::fflush(stderr);
}

std::function<void(int64_t, int64_t)> load_progress_printer() {
  const bool terminal = isatty(fileno(stderr)) != 0;
  auto last_tenth = std::make_shared<int64_t>(-1);
  return [terminal, last_tenth](int64_t done, int64_t total) {
    const double fraction = total > 0 ? static_cast<double>(done) / static_cast<double>(total) : 1.0;
    const bool big = total >= (int64_t{1} << 30);
    const double gib = big ? 1024.0 * 1024.0 * 1024.0 : 1024.0 * 1024.0;  // GiB, or MiB for small models
    const char* unit = big ? "GiB" : "MiB";
    if (terminal) {
      constexpr int kWidth = 30;
      const int filled = static_cast<int>(fraction * kWidth);
      std::fprintf(stderr, "\rtide serve: loading weights [%s%s] %3.0f%% %.2f / %.2f %s", std::string(static_cast<size_t>(filled), '#').c_str(),
                   std::string(static_cast<size_t>(kWidth - filled), ' ').c_str(), 100 * fraction,
                   static_cast<double>(done) / gib, static_cast<double>(total) / gib, unit);
      if (done >= total) std::fputc('\n', stderr);
      std::fflush(stderr);
      return;
    }
    const auto tenth = static_cast<int64_t>(fraction * 10);
    if (tenth == *last_tenth) return;
    *last_tenth = tenth;
    log_line(fmt::format("loading weights: {:.0f}% ({:.2f} of {:.2f} {})", 100 * fraction,
                         static_cast<double>(done) / gib, static_cast<double>(total) / gib, unit));
  };
}

struct HttpServer::State {
  ServerOptions options;
  std::function<std::unique_ptr<Engine>()> load_engine;
  httplib::Server http;
  int listen_socket = -1;  // the listening socket, seen when httplib creates it
  MetricsRegistry metrics;

  std::unique_ptr<Engine> engine;
  std::unique_ptr<OpenAiService> service;
  std::atomic<bool> ready{false};     // engine and service set
  std::atomic<bool> stopping{false};  // streams end, no new work

  std::mutex mutex;
  std::condition_variable wake;
  bool stop_requested = false;
  bool load_failed = false;

  void install_routes();
  void handle_generation(const httplib::Request& req, httplib::Response& res, bool chat);
  void periodic_log();
  bool authorized(const httplib::Request& req) const;
};

namespace {

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(dump_json(body), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) { send_json(res, e.status(), error_json(e)); }

}  // namespace

bool HttpServer::State::authorized(const httplib::Request& req) const {
  if (options.api_key.empty()) return true;
  const std::string header = req.get_header_value("Authorization");
  return header == "Bearer " + options.api_key;
}

// Streams (SSE) or answers in one body. A non-streaming request that is not done within a second switches to a
// chunked body led by JSON whitespace: writing it every 250 ms is how a closed connection is noticed (and the
// request cancelled) while the client waits.
void HttpServer::State::handle_generation(const httplib::Request& req, httplib::Response& res, bool chat) {
  const json body = parse_body(req.body);
  GenerationJob job = chat ? service->prepare_chat(parse_chat_request(body))
                           : service->prepare_completion(parse_completion_request(body));
  std::shared_ptr<GenerationRun> run = service->start(std::move(job));
  if (run->job().stream) {
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, run](size_t, httplib::DataSink& sink) {
          SseWriter writer([&sink](std::string_view bytes) { return sink.write(bytes.data(), bytes.size()); });
          const bool ok = run->stream(writer, [this] { return stopping.load(); });
          if (ok) sink.done();
          return ok;
        },
        [run](bool success) {
          if (!success) run->cancel();
        });
    return;
  }
  const auto deadline = std::chrono::steady_clock::now() + 1s;
  while (!run->wait(100ms)) {
    if (stopping) run->cancel();
    if (std::chrono::steady_clock::now() > deadline) break;
  }
  auto finish = [run](httplib::Response& r) {
    if (const auto error = run->error()) {
      send_error(r, ApiError(500, "generation failed: " + *error, "", "internal_error"));
    } else {
      send_json(r, 200, run->response());
    }
  };
  if (run->finished()) {
    finish(res);
    return;
  }
  res.set_chunked_content_provider(
      "application/json",
      [this, run](size_t, httplib::DataSink& sink) {
        auto next_beat = std::chrono::steady_clock::now();
        while (!run->wait(50ms)) {
          if (stopping) run->cancel();
          if (std::chrono::steady_clock::now() < next_beat) continue;
          next_beat += 250ms;
          if (!sink.write(" ", 1)) {
            run->cancel();
            return false;
          }
        }
        const std::string text = dump_json(run->error() ? error_json(ApiError(500, "generation failed: " + *run->error()))
                                                        : run->response());
        if (!sink.write(text.data(), text.size())) return false;
        sink.done();
        return true;
      },
      [run](bool success) {
        if (!success) run->cancel();
      });
}

void HttpServer::State::install_routes() {
  // Wraps a handler: readiness, authentication, and exceptions turned into OpenAI errors.
  auto api = [this](bool needs_engine, bool needs_auth, auto handler) {
    return [this, needs_engine, needs_auth, handler](const httplib::Request& req, httplib::Response& res) {
      try {
        if (needs_auth && !authorized(req)) {
          throw ApiError(401, "Unauthorized: a valid API key is required (Authorization: Bearer ...)", "",
                         "authentication_error", "invalid_api_key");
        }
        if (needs_engine && !ready) throw ApiError(503, "the model is still loading", "", "service_unavailable");
        handler(req, res);
      } catch (const ApiError& e) {
        send_error(res, e);
      } catch (const Error& e) {
        send_error(res, ApiError(400, e.what()));
      } catch (const std::bad_alloc&) {
        send_error(res, ApiError(500, "out of memory"));
      } catch (const std::exception& e) {
        send_error(res, ApiError(500, std::string("internal error: ") + e.what()));
      }
    };
  };

  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (ready) {
      res.status = 200;
    } else {
      send_error(res, ApiError(503, "the model is still loading", "", "service_unavailable"));
    }
  });
  http.Get("/version", [](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, {{"version", TIDE_VERSION}});
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    if (ready) refresh_engine_metrics(*engine, metrics);
    res.set_content(metrics.render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  http.Get("/v1/models", api(true, true, [this](const httplib::Request&, httplib::Response& res) {
             send_json(res, 200, service->models());
           }));
  http.Post("/v1/completions", api(true, true, [this](const httplib::Request& req, httplib::Response& res) {
              handle_generation(req, res, /*chat=*/false);
            }));
  http.Post("/v1/chat/completions", api(true, true, [this](const httplib::Request& req, httplib::Response& res) {
              handle_generation(req, res, /*chat=*/true);
            }));
  http.Post("/tokenize", api(true, false, [this](const httplib::Request& req, httplib::Response& res) {
              send_json(res, 200, service->tokenize(parse_tokenize_request(parse_body(req.body))));
            }));
  http.Post("/detokenize", api(true, false, [this](const httplib::Request& req, httplib::Response& res) {
              send_json(res, 200, service->detokenize(parse_detokenize_request(parse_body(req.body))));
            }));

  // Statuses httplib sets itself (unknown path 404, body too large 413, a malformed request 400) get OpenAI's
  // error body too; responses that already have one keep it.
  http.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    std::string message;
    switch (res.status) {
      case 404: message = "Not Found: " + req.method + " " + req.path; break;
      case 413: message = "the request body is too large"; break;
      default: message = "HTTP error " + std::to_string(res.status); break;
    }
    send_error(res, ApiError(res.status, message));
    return httplib::Server::HandlerResponse::Handled;
  }));
  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    send_error(res, ApiError(500, "internal error"));
  });
  http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    metrics.increment("tide_http_requests_total", 1, {{"status", std::to_string(res.status)}});
    log_line(fmt::format("{}:{} \"{} {} HTTP/{}\" {}", req.remote_addr, req.remote_port, req.method, req.path,
                         req.version.size() > 5 ? req.version.substr(5) : req.version, res.status));
  });
}

void HttpServer::State::periodic_log() {
  if (options.log_interval_s <= 0) return;
  EngineStats last{};
  auto last_time = std::chrono::steady_clock::now();
  std::unique_lock lock(mutex);
  while (!wake.wait_for(lock, std::chrono::seconds(options.log_interval_s), [&] { return stop_requested || load_failed; })) {
    if (!ready) continue;
    const EngineStats s = engine->stats();
    const auto now = std::chrono::steady_clock::now();
    const double dt = std::chrono::duration<double>(now - last_time).count();
    const bool idle = s.num_running == 0 && s.num_waiting == 0 && s.prompt_tokens == last.prompt_tokens &&
                      s.generation_tokens == last.generation_tokens;
    if (!idle) {
      // KV use: the arena, then each window's share of it (the sum over its groups).
      const KvReport report = engine->kv_report();
      const double capacity = std::max(1, report.arena.capacity_blocks);
      std::string kv = fmt::format("{:.1f}%", 100.0 * report.arena.in_use_blocks / capacity);
      std::map<int64_t, int64_t> by_window;
      int64_t queries = 0, hits = 0;
      for (const KvGroupReport& r : report.groups) {
        by_window[r.window] += r.stats.in_use_blocks;
        queries += r.stats.queries;
        hits += r.stats.hits;
      }
      std::string shares;
      for (const auto& [window, blocks] : by_window) {
        shares += fmt::format("{}{} {:.1f}%", shares.empty() ? "" : ", ",
                              window == 0 ? "global" : fmt::format("sliding {}", window), 100.0 * blocks / capacity);
      }
      kv += " (" + shares + ")";
      // The mean step of the interval and where its time went.
      const double steps = std::max<double>(1.0, static_cast<double>(s.num_steps - last.num_steps));
      const auto step_ms = [&](double now, double before) { return 1000.0 * (now - before) / steps; };
      log_line(fmt::format("prompt throughput {:.1f} tokens/s, generation throughput {:.1f} tokens/s, running {}, "
                           "waiting {}, KV use {}, prefix cache hit rate {:.1f}%, {} steps of {:.2f} ms (schedule "
                           "{:.2f}, execute {:.2f}, output {:.2f} overlapping the next step)",
                           (s.prompt_tokens - last.prompt_tokens) / dt, (s.generation_tokens - last.generation_tokens) / dt,
                           s.num_running, s.num_waiting, kv, queries == 0 ? 0.0 : 100.0 * hits / queries,
                           s.num_steps - last.num_steps,
                           step_ms(s.step_seconds, last.step_seconds),
                           step_ms(s.schedule_seconds, last.schedule_seconds),
                           step_ms(s.execute_seconds, last.execute_seconds),
                           step_ms(s.output_seconds, last.output_seconds)));
    }
    last = s;
    last_time = now;
  }
}

HttpServer::HttpServer(ServerOptions options, std::function<std::unique_ptr<Engine>()> load_engine)
    : state_(std::make_unique<State>()) {
  state_->options = std::move(options);
  if (state_->options.served_model_name.empty()) state_->options.served_model_name = state_->options.model_dir.string();
  state_->load_engine = std::move(load_engine);
}

HttpServer::~HttpServer() = default;

void HttpServer::stop() {
  std::lock_guard lock(state_->mutex);
  state_->stop_requested = true;
  state_->wake.notify_all();
}

int HttpServer::run() {
  State& s = *state_;
  // The engine's own log lines (failed steps, requests ended with an error) in the server's log format.
  set_log_sink([](const std::string& line) { log_line(line); });
  declare_metrics(s.metrics);
  s.metrics.add_counter("tide_http_requests_total", "HTTP requests answered, by status.");
  const int num_threads = s.options.num_threads;
  s.http.new_task_queue = [num_threads] { return new httplib::ThreadPool(static_cast<size_t>(num_threads)); };
  s.http.set_payload_max_length(s.options.max_body_bytes);
  s.http.set_read_timeout(30, 0);
  s.http.set_write_timeout(30, 0);
  s.http.set_keep_alive_timeout(2);
  // httplib's default socket options (SO_REUSEADDR), and the socket kept to raise its backlog below.
  s.http.set_socket_options([&s](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, reinterpret_cast<const void*>(&yes), sizeof yes);
    s.listen_socket = sock;
  });
  s.install_routes();

  int port = s.options.port;
  if (port == 0) {
    port = s.http.bind_to_any_port(s.options.host);
  } else if (!s.http.bind_to_port(s.options.host, port)) {
    port = -1;
  }
  if (port <= 0) {
    log_line(fmt::format("error: cannot listen on {}:{}", s.options.host, s.options.port));
    return 1;
  }
  // Debian's httplib is a compiled library that listens with a backlog of 5: a burst of clients (64 streams
  // connecting at once) overflowed it and, on some network stacks, got their connections reset. Calling
  // listen() again on the bound socket raises the backlog.
  if (s.listen_socket >= 0 && ::listen(s.listen_socket, SOMAXCONN) != 0) {
    log_line(fmt::format("warning: cannot raise the listen backlog: {}", std::strerror(errno)));
  }
  log_line(fmt::format("listening on http://{}:{} (model {}, served as \"{}\")", s.options.host, port,
                       s.options.model_dir.string(), s.options.served_model_name));
  std::atomic<bool> listen_done{false};
  std::thread listener([&] {
    s.http.listen_after_bind();
    listen_done = true;
  });

  std::string load_error;
  std::thread loader([&] {
    try {
      const auto start = std::chrono::steady_clock::now();
      log_line("loading " + s.options.model_dir.string());
      s.engine = s.load_engine();
      if (s.engine->tokenizer().is_stand_in()) {
        log_line(fmt::format("the model folder has no tokenizer files: using a stand-in tokenizer of {} ids (ids "
                             "0-255 are bytes, id N >= 256 is the text \"<tok_N>\")",
                             s.engine->tokenizer().vocab_size()));
      }
      std::optional<ChatTemplate> chat = ChatTemplate::from_model_dir(s.options.model_dir, s.options.chat_template);
      if (!chat) log_line("warning: the model has no chat template (/v1/chat/completions answers 400)");
      s.service = std::make_unique<OpenAiService>(*s.engine, std::move(chat), s.options.served_model_name,
                                                  s.options.model_dir.string(), s.metrics);
      s.ready = true;
      log_line(fmt::format("model loaded in {:.1f} s: max_model_len {}, ready",
                           std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                           s.engine->max_model_len()));
    } catch (const std::exception& e) {
      load_error = e.what();
      std::lock_guard lock(s.mutex);
      s.load_failed = true;
      s.wake.notify_all();
    }
  });
  std::thread logger([&] { s.periodic_log(); });

  {
    std::unique_lock lock(s.mutex);
    s.wake.wait(lock, [&] { return s.stop_requested || s.load_failed; });
  }
  log_line(s.load_failed ? "error: loading the model failed: " + load_error : "shutting down");
  s.stopping = true;
  while (!listen_done) {  // stop() is a no-op until listen_after_bind has started
    s.http.stop();
    std::this_thread::sleep_for(20ms);
  }
  listener.join();
  loader.join();
  logger.join();
  const bool failed = s.load_failed;
  s.service.reset();
  s.engine.reset();
  set_log_sink({});
  if (!failed) log_line("stopped");
  return failed ? 1 : 0;
}

}  // namespace tide::server

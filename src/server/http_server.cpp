#include "server/http_server.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>

#include <sys/resource.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "core/log.h"
#include "server/api_error.h"
#include "server/openai_protocol.h"
#include "server/http_connection.h"
#include "server/http_routes.h"
#include "server/openai_service.h"

namespace tide::server {

namespace net = boost::asio;
using tcp = net::ip::tcp;
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

struct HttpServer::State final : ConnectionHost {
  ServerOptions options;
  std::function<std::unique_ptr<Engine>()> load_engine;
  MetricsRegistry metrics;
  std::unique_ptr<ApiRoutes> routes;

  std::unique_ptr<Engine> engine;
  std::unique_ptr<OpenAiService> service;

  std::mutex mutex;
  std::condition_variable wake;
  int stop_requests = 0;  // stop() calls: 1 drains, 2 cancels at once
  bool load_failed = false;

  // Live connections (registered at accept, removed by their destructor through on_closed).
  std::mutex connections_mutex;
  std::unordered_map<const Connection*, std::weak_ptr<Connection>> connections;

  std::optional<net::io_context> io;
  std::optional<tcp::acceptor> acceptor;
  std::optional<net::steady_timer> accept_retry;
  std::optional<net::thread_pool> workers;
  bool accept_error_logged = false;

  void handle(HttpRequest request, std::function<void(HttpReply)> reply) override;
  void on_exchange(const std::string& remote, const std::string& method, const std::string& target, int status,
                   const std::string& note) override;
  void on_closed(const Connection* connection) override;
  void accept();
  std::vector<std::shared_ptr<Connection>> live_connections();
  int stop_count();
  void drain_and_close();
  void periodic_log();
};

namespace {

// Raises the open-files limit to its hard maximum: every connection is a descriptor, and the usual soft limit
// of 1,024 would refuse clients long before the server is busy.
void raise_open_files_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return;
  limit.rlim_cur = limit.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &limit) != 0) {
    log_line(fmt::format("warning: cannot raise the open-files limit: {}", std::strerror(errno)));
  }
}

// A request target as the access log shows it: at most 200 bytes, control and non-ASCII bytes escaped.
std::string printable(std::string_view text) {
  std::string out;
  for (const char ch : text.substr(0, 200)) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += ch;
    }
  }
  if (text.size() > 200) out += "...";
  return out;
}

}  // namespace

void HttpServer::State::handle(HttpRequest request, std::function<void(HttpReply)> reply) {
  net::post(*workers, [this, request = std::move(request), reply = std::move(reply)] { reply(routes->handle(request)); });
}

void HttpServer::State::on_exchange(const std::string& remote, const std::string& method, const std::string& target,
                                    int status, const std::string& note) {
  metrics.increment("tide_http_requests_total", 1, {{"status", std::to_string(status)}});
  log_line(fmt::format("{} \"{} {}\" {}{}", remote, method.empty() ? "-" : printable(method),
                       target.empty() ? "-" : printable(target), status, note.empty() ? "" : " (" + note + ")"));
}

void HttpServer::State::on_closed(const Connection* connection) {
  std::lock_guard lock(connections_mutex);
  connections.erase(connection);
}

std::vector<std::shared_ptr<Connection>> HttpServer::State::live_connections() {
  std::vector<std::shared_ptr<Connection>> live;
  std::lock_guard lock(connections_mutex);
  for (const auto& [ptr, weak] : connections) {
    if (auto c = weak.lock()) live.push_back(std::move(c));
  }
  return live;
}

void HttpServer::State::accept() {
  acceptor->async_accept(net::make_strand(*io), [this](boost::system::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted || !acceptor->is_open()) return;
    if (ec) {
      // Out of descriptors (or another transient failure): wait a moment instead of spinning.
      if (!accept_error_logged) log_line(fmt::format("warning: accepting a connection failed: {}", ec.message()));
      accept_error_logged = true;
      accept_retry->expires_after(std::chrono::milliseconds(100));
      accept_retry->async_wait([this](boost::system::error_code wait_ec) {
        if (!wait_ec) accept();
      });
      return;
    }
    accept_error_logged = false;
    boost::system::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);  // events leave at once, not after Nagle's delay
    std::shared_ptr<Connection> connection;
    {
      std::lock_guard lock(connections_mutex);
      if (connections.size() < static_cast<size_t>(options.max_connections)) {
        connection = std::make_shared<Connection>(std::move(socket), *this, options.limits);
        connections.emplace(connection.get(), connection);
      }
    }
    if (connection) {
      connection->start();
    } else {
      socket.close(ignored);  // over --max-connections
    }
    accept();
  });
}

int HttpServer::State::stop_count() {
  std::lock_guard lock(mutex);
  return stop_requests;
}

// Graceful stop: no new connections or requests; running requests finish within the drain time, then the rest
// are cancelled (they end with finish_reason "abort", their streams with a final event) and every connection
// closes.
void HttpServer::State::drain_and_close() {
  using Clock = std::chrono::steady_clock;
  routes->set_stopping();
  net::post(*io, [this] {
    boost::system::error_code ignored;
    acceptor->close(ignored);
    accept_retry->cancel();
  });
  for (const auto& c : live_connections()) c->shutdown();
  const auto busy_count = [this] {
    int busy = 0;
    for (const auto& c : live_connections()) busy += c->busy() ? 1 : 0;
    return busy;
  };
  const auto deadline = Clock::now() + options.drain_timeout;
  int busy = busy_count();
  if (busy > 0) {
    log_line(fmt::format("waiting up to {:.0f} s for {} running requests (a second signal stops at once)",
                         std::chrono::duration<double>(options.drain_timeout).count(), busy));
  }
  while (busy > 0 && Clock::now() < deadline && stop_count() < 2 && !load_failed) {
    std::this_thread::sleep_for(20ms);
    busy = busy_count();
  }
  if (busy > 0) {
    log_line(fmt::format("cancelling {} running requests", busy));
    for (const auto& c : live_connections()) c->cancel_reply();
    // Cancelled requests end at the engine's next step; connections still open after a grace period close.
    const auto grace = Clock::now() + 5s;
    while (busy_count() > 0 && Clock::now() < grace) std::this_thread::sleep_for(20ms);
  }
  for (const auto& c : live_connections()) c->close();
}

void HttpServer::State::periodic_log() {
  if (options.log_interval_s <= 0) return;
  EngineStats last{};
  auto last_time = std::chrono::steady_clock::now();
  std::unique_lock lock(mutex);
  while (!wake.wait_for(lock, std::chrono::seconds(options.log_interval_s), [&] { return stop_requests > 0 || load_failed; })) {
    if (!routes->ready()) continue;
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
      if (const int64_t verifies = s.spec_verifies - last.spec_verifies; verifies > 0) {
        const int64_t drafted = s.spec_draft_tokens - last.spec_draft_tokens;
        const int64_t accepted = s.spec_accepted_tokens - last.spec_accepted_tokens;
        // Acceptance at each draft position over the interval (positions with drafts in it).
        std::string per_position;
        for (size_t i = 0; i < s.spec_draft_tokens_per_position.size(); ++i) {
          const auto before = [&](const std::vector<int64_t>& v) { return i < v.size() ? v[i] : 0; };
          const int64_t d = s.spec_draft_tokens_per_position[i] - before(last.spec_draft_tokens_per_position);
          if (d <= 0) continue;
          const int64_t a = s.spec_accepted_tokens_per_position[i] - before(last.spec_accepted_tokens_per_position);
          per_position += fmt::format("{}{:.2f}", per_position.empty() ? "" : ", ", static_cast<double>(a) / d);
        }
        log_line(fmt::format("speculative decoding: {} drafted tokens, {} accepted ({:.1f}%), mean accepted length "
                             "{:.2f} per verification ({}), acceptance by draft position: {}",
                             drafted, accepted, drafted == 0 ? 0.0 : 100.0 * static_cast<double>(accepted) / drafted,
                             static_cast<double>(accepted) / static_cast<double>(verifies), verifies, per_position));
      }
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
  ++state_->stop_requests;
  state_->wake.notify_all();
}

int HttpServer::run() {
  State& s = *state_;
  // The engine's own log lines (failed steps, requests ended with an error) in the server's log format.
  set_log_sink([](const std::string& line) { log_line(line); });
  declare_metrics(s.metrics);
  s.metrics.add_counter("tide_http_requests_total", "HTTP requests answered, by status.");
  s.routes = std::make_unique<ApiRoutes>(s.options, s.metrics);
  raise_open_files_limit();

  const unsigned hardware = std::max(1u, std::thread::hardware_concurrency());
  const int io_threads = s.options.num_io_threads > 0 ? s.options.num_io_threads : static_cast<int>(std::min(4u, hardware));
  const int workers = s.options.num_workers > 0 ? s.options.num_workers : static_cast<int>(std::max(2u, hardware));
  s.io.emplace(io_threads);
  s.accept_retry.emplace(*s.io);
  s.workers.emplace(static_cast<size_t>(workers));
  int port = 0;
  try {
    const tcp::endpoint endpoint(net::ip::make_address(s.options.host), static_cast<unsigned short>(s.options.port));
    s.acceptor.emplace(*s.io);
    s.acceptor->open(endpoint.protocol());
    s.acceptor->set_option(tcp::acceptor::reuse_address(true));
    s.acceptor->bind(endpoint);
    s.acceptor->listen(net::socket_base::max_listen_connections);
    port = s.acceptor->local_endpoint().port();
  } catch (const boost::system::system_error& e) {
    log_line(fmt::format("error: cannot listen on {}:{}: {}", s.options.host, s.options.port, e.code().message()));
    s.workers->join();
    return 1;
  }
  log_line(fmt::format("listening on http://{}:{} (model {}, served as \"{}\")", s.options.host, port,
                       s.options.model_dir.string(), s.options.served_model_name));
  s.accept();
  std::vector<std::thread> io_threads_running;
  for (int i = 0; i < io_threads; ++i) io_threads_running.emplace_back([&s] { s.io->run(); });
  // The accept loop keeps the I/O context busy until the listener closes; this guard holds it past that, until
  // every connection is closed below.
  auto guard = net::make_work_guard(*s.io);

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
      ChatTemplates chat = ChatTemplates::from_model_dir(s.options.model_dir, s.options.chat_template);
      if (chat.empty()) {
        log_line("warning: the model has no chat template (/v1/chat/completions and /v2/chat answer 400)");
      } else if (chat.names().size() > 1) {
        log_line(fmt::format("chat templates: {}", fmt::join(chat.names(), ", ")));
      }
      s.service = std::make_unique<OpenAiService>(*s.engine, std::move(chat), s.options.chat,
                                                  s.options.served_model_name, s.options.model_dir.string(), s.metrics);
      s.routes->set_ready(*s.engine, *s.service);
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
    s.wake.wait(lock, [&] { return s.stop_requests > 0 || s.load_failed; });
  }
  log_line(s.load_failed ? "error: loading the model failed: " + load_error : "shutting down");
  s.drain_and_close();
  s.workers->join();
  guard.reset();
  s.io->stop();
  for (std::thread& t : io_threads_running) t.join();
  loader.join();
  logger.join();
  // Connections (and the generations they hold) go before the engine they reference.
  s.acceptor.reset();
  s.accept_retry.reset();
  s.io.reset();
  s.workers.reset();
  const bool failed = s.load_failed;
  s.routes.reset();
  s.service.reset();
  s.engine.reset();
  set_log_sink({});
  if (!failed) log_line("stopped");
  return failed ? 1 : 0;
}

}  // namespace tide::server

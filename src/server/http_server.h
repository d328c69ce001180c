// HttpServer: tide's OpenAI-compatible HTTP server on Boost.Asio (connections: http_connection.h; endpoints:
// http_routes.h). It listens first and loads the engine in the background (/health answers 503 until it is
// ready), holds thousands of idle or slow connections without a thread each, writes an access line per exchange
// and a periodic throughput line, and stops gracefully: stop() closes the listener and idle connections, lets
// running requests finish for `drain_timeout`, then cancels the rest (they end with finish_reason "abort") and
// closes every connection; a second stop() cancels at once.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <condition_variable>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "runtime/engine.h"
#include "server/http_types.h"
#include "server/metrics.h"
#include "server/openai_service.h"

namespace tide::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                                  // 0: any free port (logged)
  std::filesystem::path model_dir;
  std::string served_model_name;                    // empty: model_dir as given
  std::string api_key;                              // empty: no authentication
  bool metrics_need_api_key = false;                // /metrics asks for the key too (/health never does)
  std::optional<std::filesystem::path> chat_template;  // replaces every template of the model folder
  ChatSettings chat;                                 // request templates, output parsing
  ConnectionLimits limits;                          // per-phase timeouts, header and body sizes
  int max_connections = 16384;                      // beyond: new connections are closed at once
  // Samples submitted and not finished, beyond which a generation request gets 429 (Retry-After).
  int64_t max_pending_samples = 4096;
  int num_io_threads = 0;                           // 0: up to 4 (the hardware's threads)
  int num_workers = 0;                              // request handlers (parsing, templates); 0: the hardware's
  std::chrono::milliseconds drain_timeout{30000};   // stop(): running requests may finish for this long
  int log_interval_s = 10;                          // the periodic throughput line; 0: off
};

class HttpServer {
 public:
  // `load_engine` builds the engine (slow); it runs on a background thread after the port is bound.
  HttpServer(ServerOptions options, std::function<std::unique_ptr<Engine>()> load_engine);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds, serves, loads the engine; returns when stop() was called (0) or when binding or loading failed (1,
  // the reason logged).
  int run();
  // Asks run() to stop gracefully (a second call: at once); thread-safe, returns at once.
  void stop();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// One log line on stderr with a timestamp; thread-safe.
void log_line(const std::string& line);
// A weight-loading progress display for EngineOptions::load_progress: a bar redrawn in place when stderr is a
// terminal, otherwise a log line at every tenth of the checkpoint.
std::function<void(int64_t done, int64_t total)> load_progress_printer();

}  // namespace tide::server

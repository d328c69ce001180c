// HttpServer: tide's OpenAI-compatible HTTP server (cpp-httplib). It listens first and loads the engine in the
// background (/health answers 503 until it is ready), routes the endpoints to OpenAiService, answers errors in
// OpenAI's shape, authenticates /v1 with --api-key, writes an access line per request and a periodic
// throughput line, and stops gracefully (stop(): no new connections, running streams end, the engine aborts
// what is left).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "runtime/engine.h"
#include "server/metrics.h"

namespace tide::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                                  // 0: any free port (logged)
  std::filesystem::path model_dir;
  std::string served_model_name;                    // empty: model_dir as given
  std::string api_key;                              // empty: no authentication
  std::optional<std::filesystem::path> chat_template;
  size_t max_body_bytes = 32u << 20;
  int num_threads = 512;                            // connections served at once (each stream holds one)
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
  // Asks run() to return; thread-safe, returns at once.
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

// The HTTP side of tide bench serve (cpp-httplib): the server's model card, one streamed completion per thread,
// and the dispatcher that sends requests at their arrival times while at most N are in flight. Each request has
// its own thread and its own connection (no keep-alive), so hundreds of streams run at once and a slow stream
// never delays another's timestamps.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "apps/tide/bench_serve/request_record.h"

namespace tide::bench {

using Clock = std::chrono::steady_clock;

struct Endpoint {
  std::string base_url;  // scheme://host[:port][/prefix]
  std::string path = "/v1/completions";
  std::string api_key;          // sent as "Authorization: Bearer KEY" when set
  int connect_timeout_s = 30;
  int read_timeout_s = 600;     // the longest wait for any bytes (a stream's first token included)
};

struct ServerInfo {
  std::string model;                    // the first model's id
  std::optional<int64_t> max_model_len;
  std::optional<int64_t> vocab_size;    // tide's model card has it; vLLM's does not
};

// GET /v1/models. Retries every half second for `ready_timeout_s` while the server cannot be reached or answers
// otherwise than 200 (a server still loading). Throws tide::Error when it never answered 200, or lists no model.
ServerInfo query_server(const Endpoint& endpoint, double ready_timeout_s);

// POSTs `body` (a streaming completion request) and records the response into `record` (start_s, chunk times,
// usage, finish reason, success). Times are seconds since `t0`. Never throws: what goes wrong is the record's
// error.
void send_request(const Endpoint& endpoint, const std::string& body, Clock::time_point t0, RequestRecord& record);

// Sends bodies[i] at t0 + arrivals[i] seconds (ascending), or later while `max_concurrency` requests (0: no
// limit) are in flight, each on its own thread; returns when every request ended. `records[i]` receives request
// i's record. `on_done(i)` runs, serialized, as each request ends.
void run_requests(const Endpoint& endpoint, const std::vector<std::string>& bodies, const std::vector<double>& arrivals,
                  int64_t max_concurrency, Clock::time_point t0, std::vector<RequestRecord>& records,
                  const std::function<void(size_t)>& on_done);

}  // namespace tide::bench

#include "apps/tide/bench_serve_client.h"

#include <httplib.h>

#include <algorithm>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "apps/tide/bench_serve/completion_stream.h"
#include "core/error.h"

namespace tide::bench {
namespace {

using nlohmann::json;

// httplib's client takes scheme://host:port; a path after it (a proxy's prefix) goes before each route.
struct BaseUrl {
  std::string scheme_host_port;
  std::string prefix;
};

BaseUrl split_base_url(const std::string& url) {
  const size_t scheme = url.find("://");
  const size_t slash = url.find('/', scheme == std::string::npos ? 0 : scheme + 3);
  if (slash == std::string::npos) return {url, ""};
  std::string prefix = url.substr(slash);
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  return {url.substr(0, slash), prefix};
}

std::unique_ptr<httplib::Client> make_client(const Endpoint& endpoint, const BaseUrl& base) {
  auto client = std::make_unique<httplib::Client>(base.scheme_host_port);
  if (!client->is_valid()) fail("--base-url '{}': not an http:// or https:// URL", endpoint.base_url);
  client->set_connection_timeout(endpoint.connect_timeout_s);
  client->set_read_timeout(endpoint.read_timeout_s);
  client->set_write_timeout(endpoint.connect_timeout_s);
  client->set_keep_alive(false);
  return client;
}

httplib::Headers auth_headers(const Endpoint& endpoint) {
  httplib::Headers headers;
  if (!endpoint.api_key.empty()) headers.emplace("Authorization", "Bearer " + endpoint.api_key);
  return headers;
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::optional<int64_t> integer_field(const json& object, const char* key) {
  if (!object.contains(key) || !object[key].is_number_integer()) return std::nullopt;
  return object[key].get<int64_t>();
}

}  // namespace

ServerInfo query_server(const Endpoint& endpoint, double ready_timeout_s) {
  const BaseUrl base = split_base_url(endpoint.base_url);
  const std::string url = endpoint.base_url + "/v1/models";
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(std::max(0.0, ready_timeout_s)));
  for (;;) {
    const auto client = make_client(endpoint, base);
    const httplib::Result res = client->Get(base.prefix + "/v1/models", auth_headers(endpoint));
    if (res && res->status == 200) {
      const json body = json::parse(res->body, nullptr, false);
      if (body.is_discarded() || !body.is_object() || !body.contains("data") || !body["data"].is_array() ||
          body["data"].empty() || !body["data"][0].is_object() || !body["data"][0].contains("id") ||
          !body["data"][0]["id"].is_string()) {
        fail("{} answered no model list: {}", url, res->body.substr(0, 300));
      }
      const json& card = body["data"][0];
      ServerInfo info;
      info.model = card["id"].get<std::string>();
      info.max_model_len = integer_field(card, "max_model_len");
      info.vocab_size = integer_field(card, "vocab_size");
      return info;
    }
    if (Clock::now() >= deadline) {
      const std::string why = res ? fmt::format("HTTP {}: {}", res->status, res->body.substr(0, 300))
                                  : httplib::to_string(res.error());
      fail("cannot reach the server: GET {} failed ({}){}", url, why,
           ready_timeout_s > 0 ? fmt::format(" for {} s", ready_timeout_s) : "");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

void send_request(const Endpoint& endpoint, const std::string& body, Clock::time_point t0, RequestRecord& record) {
  CompletionStream stream(record);
  std::string transport_error;
  try {
    const BaseUrl base = split_base_url(endpoint.base_url);
    const auto client = make_client(endpoint, base);
    httplib::Request req;
    req.method = "POST";
    req.path = base.prefix + endpoint.path;
    req.headers = auth_headers(endpoint);
    req.headers.emplace("Content-Type", "application/json");
    req.headers.emplace("Accept", "text/event-stream");
    req.body = body;
    req.response_handler = [&](const httplib::Response& res) {
      stream.on_status(res.status);
      return true;
    };
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      stream.on_bytes(std::string_view(data, n), seconds_since(t0));
      return true;
    };
    record.start_s = seconds_since(t0);
    const httplib::Result res = client->send(req);
    if (!res) {
      transport_error = httplib::to_string(res.error());
    } else if (record.http_status == 0) {
      stream.on_status(res->status);  // a response without a body (204): no handler call
    }
  } catch (const std::exception& e) {
    transport_error = e.what();
  }
  stream.finish(seconds_since(t0), transport_error);
}

void run_requests(const Endpoint& endpoint, const std::vector<std::string>& bodies, const std::vector<double>& arrivals,
                  int64_t max_concurrency, Clock::time_point t0, std::vector<RequestRecord>& records,
                  const std::function<void(size_t)>& on_done) {
  TIDE_CHECK(arrivals.size() == bodies.size() && records.size() == bodies.size());
  std::mutex mutex;
  std::condition_variable changed;
  int64_t in_flight = 0;
  std::vector<size_t> ended;  // requests whose threads finished and wait to be joined
  std::vector<std::thread> threads(bodies.size());
  // Joins the finished threads (without the lock: a joined thread may still be releasing it).
  auto join_ended = [&](std::unique_lock<std::mutex>& lock) {
    std::vector<size_t> ready;
    ready.swap(ended);
    lock.unlock();
    for (size_t i : ready) threads[i].join();
    lock.lock();
  };
  for (size_t i = 0; i < bodies.size(); ++i) {
    const auto arrival = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(arrivals[i]));
    std::this_thread::sleep_until(t0 + arrival);
    std::unique_lock lock(mutex);
    changed.wait(lock, [&] { return max_concurrency <= 0 || in_flight < max_concurrency; });
    join_ended(lock);
    ++in_flight;
    for (;;) {
      try {
        threads[i] = std::thread([&, i] {
          send_request(endpoint, bodies[i], t0, records[i]);
          std::lock_guard done_lock(mutex);
          --in_flight;
          ended.push_back(i);
          on_done(i);
          changed.notify_all();
        });
        break;
      } catch (const std::system_error& e) {
        // No thread to be had (a process limit): wait for a request in flight to end and try again; when this
        // request is the only one in flight, it fails.
        if (in_flight <= 1 && ended.empty()) {
          --in_flight;
          records[i].start_s = records[i].end_s = seconds_since(t0);
          records[i].error = std::string("cannot start a thread for the request: ") + e.what();
          on_done(i);
          break;
        }
        changed.wait(lock, [&] { return !ended.empty(); });
        join_ended(lock);
      }
    }
  }
  std::unique_lock lock(mutex);
  changed.wait(lock, [&] { return in_flight == 0; });
  lock.unlock();
  for (std::thread& t : threads) {
    if (t.joinable()) t.join();
  }
}

}  // namespace tide::bench

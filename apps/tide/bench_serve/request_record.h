// What the benchmark records of one request: when it was sent, when each chunk carrying tokens arrived, what the
// server said about it (usage, finish reason, HTTP status) and whether it failed. Times are seconds since the
// benchmark began (one steady clock for every request). The latency figures derive from these, with vLLM's
// definitions (vllm bench serve), so that the two benchmarks' reports compare.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tide::bench {

struct RequestRecord {
  // Set before sending.
  int64_t prompt_len = 0;  // tokens sent; replaced by the usage chunk's prompt_tokens when the server sends one
  int64_t max_tokens = 0;  // output tokens asked for
  // Set while it runs.
  double start_s = 0;            // the request was sent
  double end_s = 0;              // the response ended (or the connection broke)
  int http_status = 0;           // 0: no response
  std::vector<double> chunk_s;   // arrival of each chunk with a choice in it (a token chunk)
  int64_t output_tokens = 0;     // the usage chunk's completion_tokens, else the number of token chunks
  bool usage_seen = false;
  std::optional<int64_t> cached_tokens;  // usage.prompt_tokens_details.cached_tokens, when reported
  std::string finish_reason;     // empty: the stream gave none
  bool success = false;
  std::string error;             // why it failed; empty on success

  // Time to first token: the first token chunk's arrival after the send. 0 without token chunks.
  double ttft_s() const { return chunk_s.empty() ? 0.0 : chunk_s.front() - start_s; }
  // End-to-end latency: the send to the last token chunk (vLLM's "latency"; the usage chunk and [DONE] after
  // it carry no token). 0 without token chunks.
  double e2el_s() const { return chunk_s.empty() ? 0.0 : chunk_s.back() - start_s; }
  // Time per output token after the first: (e2el - ttft) / (output_tokens - 1); none for fewer than 2 tokens.
  std::optional<double> tpot_s() const {
    if (output_tokens < 2 || chunk_s.empty()) return std::nullopt;
    return (e2el_s() - ttft_s()) / static_cast<double>(output_tokens - 1);
  }
  // Inter-token latencies: the gaps between consecutive token chunks (a chunk may carry several tokens).
  std::vector<double> itls_s() const {
    std::vector<double> out;
    for (size_t i = 1; i < chunk_s.size(); ++i) out.push_back(chunk_s[i] - chunk_s[i - 1]);
    return out;
  }
};

}  // namespace tide::bench

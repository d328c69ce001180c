// The engine when the device fails a step. Out of memory (a backend that refuses activation buffers of more
// than a set number of rows, as a GPU with too little memory for a step would): the step is taken back and
// retried with fewer tokens or fewer requests, and every request still finishes with the ids an unlimited
// engine gives. A single token that finds no memory ends its own request only. Another fault ends the requests
// of the failed step; the others, and later ones, go on: a step that fails is retried once, then its requests
// run fewer at once until the failing one runs alone, so that one request's fault (a poisoned prompt token, a
// sampling row the device refuses) never ends the others, which give the ids of an engine without faults.
// Each case is logged.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>

#include "../test_util.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/forwarding_backend.h"
#include "core/log.h"
#include "runtime/engine.h"

namespace tide {
namespace {

using test::fixture;

// The CPU backend with a device-memory limit, set once the model is loaded: buffers of [rows, cols] with more
// than `max_rows` rows (the steps' activations) throw OutOfMemoryError, a step whose token ids hold `poison`
// fails with a plain tide::Error, and so does a sample op with a row of seed `poison_seed`.
class FaultyBackend final : public ForwardingBackend {
 public:
  struct Faults {
    std::atomic<int64_t> max_rows{INT64_MAX};
    std::atomic<int32_t> poison{-1};
    std::atomic<int64_t> refused{0};  // allocations refused so far
    std::atomic<uint64_t> poison_seed{0};  // 0: none
    std::atomic<int64_t> samples_before_fault{-1};  // sample ops that run before one fails, whatever its rows
    std::atomic<int64_t> failed_samples{0};  // sample ops failed so far
  };

  explicit FaultyBackend(std::shared_ptr<Faults> faults)
      : FaultyBackend(std::make_unique<CpuBackend>(), std::move(faults)) {}

  Tensor alloc(DType dtype, Shape shape) override {
    check(shape);
    return ForwardingBackend::alloc(dtype, std::move(shape));
  }
  Tensor alloc_uninitialized(DType dtype, Shape shape) override {
    check(shape);
    return ForwardingBackend::alloc_uninitialized(dtype, std::move(shape));
  }
  void embedding(Tensor out, const Tensor& table, const Tensor& ids) override {
    for (int64_t i = 0; i < ids.numel(); ++i) {
      if (ids.as<int32_t>()[i] == faults_->poison) fail("test: the device failed on token {}", faults_->poison.load());
    }
    ForwardingBackend::embedding(std::move(out), table, ids);
  }
  void sample(Tensor out_ids, Tensor logits, const SamplingBatch& batch) override {
    if (faults_->samples_before_fault >= 0 && faults_->samples_before_fault-- == 0) {
      ++faults_->failed_samples;
      fail("test: the device failed a sample op");
    }
    for (const SamplingRow& row : batch.rows) {
      if (faults_->poison_seed != 0 && row.seed == faults_->poison_seed) {
        ++faults_->failed_samples;
        fail("test: the device refused the sampling row of seed {}", row.seed);
      }
    }
    ForwardingBackend::sample(std::move(out_ids), std::move(logits), batch);
  }

 private:
  FaultyBackend(std::unique_ptr<Backend> inner, std::shared_ptr<Faults> faults)
      : ForwardingBackend(*inner), owned_(std::move(inner)), faults_(std::move(faults)) {}

  void check(const Shape& shape) {
    if (shape.ndim == 2 && shape[0] > faults_->max_rows) {
      ++faults_->refused;
      throw OutOfMemoryError(fmt::format("test: no device memory for {} rows", shape[0]));
    }
  }

  std::unique_ptr<Backend> owned_;
  std::shared_ptr<FaultyBackend::Faults> faults_;
};

EngineOptions options() {
  EngineOptions o;
  o.block_size = 4;
  o.kv_cache_memory = int64_t{64} << 20;
  o.max_prefill_chunk = 32;
  o.max_num_batched_tokens = 64;
  o.enforce_eager = true;  // no decode graphs, whose one [256, vocab] logits buffer the row limit would refuse
  return o;
}

// The engine's log lines while it lives.
class LogCapture {
 public:
  LogCapture() {
    set_log_sink([this](const std::string& line) {
      std::lock_guard lock(mutex_);
      lines_.push_back(line);
    });
  }
  ~LogCapture() { set_log_sink({}); }
  bool contains(const std::string& text) {
    std::lock_guard lock(mutex_);
    for (const std::string& l : lines_) {
      if (l.find(text) != std::string::npos) return true;
    }
    return false;
  }

 private:
  std::mutex mutex_;
  std::vector<std::string> lines_;
};

std::vector<BatchRequest> requests(int n) {
  std::vector<BatchRequest> out;
  for (int i = 0; i < n; ++i) {
    BatchRequest r;
    for (int t = 0; t < 5 + 3 * i; ++t) r.prompt.push_back(17 + (i * 31 + t * 7) % 900);
    r.options.max_tokens = 8 + i % 5;
    r.options.ignore_eos = true;
    out.push_back(std::move(r));
  }
  return out;
}

TEST(EngineFaults, OutOfMemoryStepsAreRetriedSmallerAndEveryRequestFinishes) {
  LogCapture log;
  auto faults = std::make_shared<FaultyBackend::Faults>();
  Engine limited(fixture("cohere2-tiny"), std::make_unique<FaultyBackend>(faults), options());
  faults->max_rows = 7;  // once the weights are loaded: less than the prefill chunks of the batch
  Engine plain(fixture("cohere2-tiny"), std::make_unique<CpuBackend>(), options());
  const std::vector<BatchRequest> batch = requests(12);
  const std::vector<GenerateResult> got = limited.generate_batch(batch);
  const std::vector<GenerateResult> want = plain.generate_batch(batch);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].finish_reason, "length") << i << ": " << got[i].error;
    EXPECT_EQ(got[i].ids, want[i].ids) << i;
  }
  EXPECT_GT(faults->refused.load(), 0);
  EXPECT_TRUE(log.contains("steps take at most"));  // prefill chunks: a smaller token budget
  EXPECT_EQ(limited.kv_report().arena.in_use_blocks, 0);
}

TEST(EngineFaults, DecodeStepsThatFindNoMemoryRunFewerRequests) {
  LogCapture log;
  auto faults = std::make_shared<FaultyBackend::Faults>();
  Engine limited(fixture("cohere2-tiny"), std::make_unique<FaultyBackend>(faults), options());
  Engine plain(fixture("cohere2-tiny"), std::make_unique<CpuBackend>(), options());
  std::vector<BatchRequest> batch = requests(12);
  for (BatchRequest& r : batch) r.options.max_tokens = 24;
  // All 12 prefill and start decoding with room to spare; then the device holds 5 rows of activations.
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (const BatchRequest& r : batch) handles.push_back(limited.submit(r.prompt, r.options));
  std::vector<SampleResult> got(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) got[i].add(*handles[i]->next());
  faults->max_rows = 5;
  for (size_t i = 0; i < batch.size(); ++i) {
    while (std::optional<SampleDelta> d = handles[i]->next()) got[i].add(*d);
    EXPECT_EQ(got[i].finish_reason, "length") << i << ": " << got[i].error;
    EXPECT_EQ(got[i].ids, plain.generate(batch[i].prompt, batch[i].options).ids) << i;
  }
  EXPECT_TRUE(log.contains("preempted, at most"));  // decodes alone: fewer requests at once
  EXPECT_GT(limited.stats().num_preemptions, 0);
  EXPECT_EQ(limited.kv_report().arena.in_use_blocks, 0);
}

TEST(EngineFaults, ATokenThatFindsNoMemoryEndsOnlyItsRequest) {
  LogCapture log;
  auto faults = std::make_shared<FaultyBackend::Faults>();
  EngineOptions o = options();
  o.max_num_seqs = 1;  // the second request waits, outside the failing steps
  Engine engine(fixture("cohere2-tiny"), std::make_unique<FaultyBackend>(faults), o);
  faults->max_rows = 0;
  GenerateOptions g;
  g.max_tokens = 4;
  g.request_id = "starved";
  const std::shared_ptr<RequestHandle> starved = engine.submit({5, 17, 42}, g);
  SampleResult first;
  while (std::optional<SampleDelta> d = starved->next()) first.add(*d);
  EXPECT_EQ(first.finish_reason, "error");
  EXPECT_NE(first.error.find("no memory"), std::string::npos) << first.error;
  EXPECT_TRUE(log.contains("request starved (sample 0) ended with an error"));
  faults->max_rows = INT64_MAX;  // memory again: the engine serves the next request
  EXPECT_EQ(engine.generate(std::vector<int32_t>{5, 17, 43}, g).ids.size(), 4u);
  EXPECT_EQ(engine.kv_report().arena.in_use_blocks, 0);
}

TEST(EngineFaults, AFaultEndsTheRequestsOfItsStepOnly) {
  LogCapture log;
  auto faults = std::make_shared<FaultyBackend::Faults>();
  faults->poison = 1000;
  EngineOptions o = options();
  o.max_num_seqs = 1;
  Engine engine(fixture("cohere2-tiny"), std::make_unique<FaultyBackend>(faults), o);
  Engine plain(fixture("cohere2-tiny"), std::make_unique<CpuBackend>(), o);
  GenerateOptions g;
  g.max_tokens = 6;
  g.ignore_eos = true;
  const std::vector<int32_t> poisoned{5, 1000, 42}, fine{5, 17, 42};
  const std::shared_ptr<RequestHandle> a = engine.submit(poisoned, g);
  const std::shared_ptr<RequestHandle> b = engine.submit(fine, g);
  SampleResult ra, rb;
  while (std::optional<SampleDelta> d = a->next()) ra.add(*d);
  while (std::optional<SampleDelta> d = b->next()) rb.add(*d);
  EXPECT_EQ(ra.finish_reason, "error");
  EXPECT_NE(ra.error.find("the device failed on token 1000"), std::string::npos) << ra.error;
  EXPECT_EQ(rb.finish_reason, "length") << rb.error;
  EXPECT_EQ(rb.ids, plain.generate(fine, g).ids);
  EXPECT_TRUE(log.contains("failed: test: the device failed on token 1000"));
  EXPECT_EQ(engine.kv_report().arena.in_use_blocks, 0);
}

// Requests that run together, one of them poisoned in the prompt: the steps that hold it fail; it ends alone
// with the error, the others finish with the ids of an engine without faults.
TEST(EngineFaults, APoisonedPromptAmongManyEndsOnlyItsOwnRequest) {
  LogCapture log;
  auto faults = std::make_shared<FaultyBackend::Faults>();
  faults->poison = 1000;
  Engine engine(fixture("cohere2-tiny"), std::make_unique<FaultyBackend>(faults), options());
  Engine plain(fixture("cohere2-tiny"), std::make_unique<CpuBackend>(), options());
  std::vector<BatchRequest> batch = requests(8);
  const size_t poisoned = 5;
  batch[poisoned].prompt[2] = 1000;
  const std::vector<GenerateResult> got = engine.generate_batch(batch);
  for (size_t i = 0; i < batch.size(); ++i) {
    if (i == poisoned) {
      EXPECT_EQ(got[i].finish_reason, "error");
      EXPECT_NE(got[i].error.find("the device failed on token 1000"), std::string::npos) << got[i].error;
      continue;
    }
    EXPECT_EQ(got[i].finish_reason, "length") << i << ": " << got[i].error;
    EXPECT_EQ(got[i].ids, plain.generate(batch[i].prompt, batch[i].options).ids) << i;
  }
  EXPECT_TRUE(log.contains("retrying it"));
  EXPECT_TRUE(log.contains("until the failing request runs alone"));
  EXPECT_TRUE(log.contains("ended with an error"));
  EXPECT_EQ(engine.kv_report().arena.in_use_blocks, 0);
  // The engine serves every request as before.
  EXPECT_EQ(engine.generate(batch[0].prompt, batch[0].options).ids, got[0].ids);
}

// The sample op fails for a batch because of one row (here: the device refuses a row by its seed) while the
// requests decode together: that request ends, with a message, and the others' ids are those of a clean run.
TEST(EngineFaults, ASamplingRowTheDeviceRefusesEndsOnlyItsRequest) {
  LogCapture log;
  auto faults = std::make_shared<FaultyBackend::Faults>();
  faults->poison_seed = 777;
  Engine engine(fixture("cohere2-tiny"), std::make_unique<FaultyBackend>(faults), options());
  Engine plain(fixture("cohere2-tiny"), std::make_unique<CpuBackend>(), options());
  std::vector<BatchRequest> batch = requests(8);
  for (size_t i = 0; i < batch.size(); ++i) {
    batch[i].options.sampling.temperature = 0.8;
    batch[i].options.sampling.top_p = 0.9;
    batch[i].options.sampling.seed = 100 + i;
  }
  const size_t poisoned = 2;
  batch[poisoned].options.sampling.seed = 777;
  const std::vector<GenerateResult> got = engine.generate_batch(batch);
  const std::vector<GenerateResult> want = plain.generate_batch(batch);
  for (size_t i = 0; i < batch.size(); ++i) {
    if (i == poisoned) {
      EXPECT_EQ(got[i].finish_reason, "error");
      EXPECT_NE(got[i].error.find("refused the sampling row of seed 777"), std::string::npos) << got[i].error;
      EXPECT_TRUE(got[i].ids.empty());
      continue;
    }
    EXPECT_EQ(got[i].finish_reason, "length") << i << ": " << got[i].error;
    EXPECT_EQ(got[i].ids, want[i].ids) << i;
  }
  EXPECT_GE(faults->failed_samples.load(), 2);  // tried, retried, then alone
  EXPECT_TRUE(log.contains("refused the sampling row of seed 777"));
  EXPECT_EQ(engine.kv_report().arena.in_use_blocks, 0);
}

// A step that fails once (a transient device fault) is retried: every request finishes with its ids.
TEST(EngineFaults, AFaultThatDoesNotRepeatEndsNoRequest) {
  LogCapture log;
  auto faults = std::make_shared<FaultyBackend::Faults>();
  Engine engine(fixture("cohere2-tiny"), std::make_unique<FaultyBackend>(faults), options());
  Engine plain(fixture("cohere2-tiny"), std::make_unique<CpuBackend>(), options());
  std::vector<BatchRequest> batch = requests(4);
  for (BatchRequest& r : batch) r.options.max_tokens = 16;
  faults->samples_before_fault = 3;  // the fourth sample op fails, once
  const std::vector<GenerateResult> got = engine.generate_batch(batch);
  const std::vector<GenerateResult> want = plain.generate_batch(batch);
  for (size_t i = 0; i < batch.size(); ++i) {
    EXPECT_EQ(got[i].finish_reason, "length") << i << ": " << got[i].error;
    EXPECT_EQ(got[i].ids, want[i].ids) << i;
  }
  EXPECT_EQ(faults->failed_samples.load(), 1);
  EXPECT_TRUE(log.contains("test: the device failed a sample op; retrying it"));
}

}  // namespace
}  // namespace tide

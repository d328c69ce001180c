// The benchmark's prompts and their arrival times, drawn from a seeded RNG so that a seed names a workload.
// Prompts are token ids (sent as "prompt": [ids]), so no tokenizer is needed and every server sees the same
// tokens. Ids are drawn uniformly from [first_token_id(V), V) of the server's vocabulary V: BPE vocabularies keep
// their special and byte-fallback tokens among the first ids, which a benchmark prompt should not be made of.
//
//   random:        [common prefix][own part]
//   shared-prefix: [common prefix][its group's prefix][own part]   (prompt i in group i % num_groups)
//
// The common prefix (prefix_len tokens, vLLM's --random-prefix-len) is the same for every prompt; each own part
// and each output length is uniform in [floor(len * (1 - r)), ceil(len * (1 + r))] as vLLM's random dataset draws
// them (outputs at least 1 token).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tide::bench {

enum class Dataset { kRandom, kSharedPrefix };

struct WorkloadOptions {
  Dataset dataset = Dataset::kRandom;
  int64_t num_prompts = 1000;
  int64_t input_len = 1024;       // each prompt's own part, after its shared prefixes
  int64_t output_len = 128;
  double range_ratio = 0;         // in [0, 1)
  int64_t prefix_len = 0;         // the prefix common to every prompt
  int64_t num_groups = 1;         // shared-prefix: groups of prompts, each with its own prefix
  int64_t group_prefix_len = 0;   // shared-prefix: the length of a group's prefix
  int64_t vocab_size = 0;
  uint64_t seed = 0;
};

struct BenchPrompt {
  std::vector<int32_t> ids;
  int64_t max_tokens = 0;
  int64_t group = 0;        // 0 for the random dataset
  int64_t num_shared = 0;   // leading ids shared with other prompts (common prefix + group prefix)
};

struct LengthRange {
  int64_t low = 0;
  int64_t high = 0;
};

// [floor(len * (1 - ratio)), ceil(len * (1 + ratio))], the low end raised to `min`.
LengthRange length_range(int64_t len, double ratio, int64_t min);
// The smallest id drawn: 256 when the vocabulary has at least 512 ids, else 0.
int32_t first_token_id(int64_t vocab_size);
// The prompts, deterministic in options (seed included). Throws tide::Error on impossible options.
std::vector<BenchPrompt> make_workload(const WorkloadOptions& options);
// Seconds after the start at which each of `n` requests arrives. rate = infinity: all at 0. Otherwise gaps drawn
// from a gamma distribution of shape `burstiness` and mean 1 / rate (burstiness 1: exponential, a Poisson
// process; smaller: burstier; infinity: evenly spaced), accumulated, then scaled so that the last arrival is at
// n / rate exactly, as vLLM does to keep throughput comparable between seeds. Ascending.
std::vector<double> arrival_times(int64_t n, double rate, double burstiness, uint64_t seed);

const char* dataset_name(Dataset dataset);

}  // namespace tide::bench

// The tide program as users and scripts call it: JSON output of every command, and errors on bad flags,
// bad ids and missing models (stderr, non-zero status, never a crash).
#include <gtest/gtest.h>

#include <sstream>

#include "../test_util.h"
#include "cli_run.h"

namespace tide {
namespace {

using test::RunResult;

RunResult run(const std::string& args) { return test::run_tide(args); }

const std::string kModel = "--model " + test::fixture("cohere2-tiny").string();

TEST(Cli, GenerateJsonMatchesGoldenGreedyIds) {
  const nlohmann::json g = test::read_json(test::fixture("cohere2-tiny/golden.json"));
  const auto& c = g["generate"][0];
  std::string ids;
  for (const auto& id : c["prompt_ids"]) ids += (ids.empty() ? "" : ",") + std::to_string(id.get<int>());
  const RunResult r = run("generate " + kModel + " --prompt-ids " + ids + " --max-tokens 20 --ignore-eos --json");
  ASSERT_EQ(r.status, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["prompt_ids"], c["prompt_ids"]);
  const auto want = test::ids_of(c["greedy_ids"]);
  EXPECT_EQ(j["ids"].get<std::vector<int32_t>>(), std::vector<int32_t>(want.begin(), want.begin() + 20));
  EXPECT_TRUE(j["text"].is_string());
}

// --speculative-config with a draft model (here the model itself): the same ids, drafts accepted, and the
// draft's steps counted in the JSON; a draft of another vocabulary is refused naming both sizes.
TEST(Cli, GenerateWithADraftModelGivesTheSameIds) {
  const std::string demo = test::bundled_model("tide-demo").string();
  const std::string common = "generate --model " + demo + " --prompt 'def fibonacci(n):' --max-tokens 32 --ignore-eos --json";
  const RunResult plain = run(common);
  ASSERT_EQ(plain.status, 0) << plain.out;
  const RunResult drafted =
      run(common + " --speculative-config '{\"model\": \"" + demo + "\", \"num_speculative_tokens\": 3}'");
  ASSERT_EQ(drafted.status, 0) << drafted.out;
  const nlohmann::json a = nlohmann::json::parse(plain.out), b = nlohmann::json::parse(drafted.out);
  EXPECT_EQ(b["ids"], a["ids"]);
  EXPECT_GT(b["speculative"]["accepted_tokens"].get<int64_t>(), 0) << drafted.out;
  EXPECT_GT(b["speculative"]["draft_steps"].get<int64_t>(), 0) << drafted.out;
  const RunResult refused = run("generate " + kModel + " --prompt-ids 1,2,3 --max-tokens 4 --speculative-config '{\"model\": \"" +
                                demo + "\", \"num_speculative_tokens\": 3}'");
  EXPECT_EQ(refused.status, 1) << refused.out;
  EXPECT_NE(refused.out.find("vocabulary of 4096 tokens"), std::string::npos) << refused.out;
}

TEST(Cli, GenerateFromTextPrintsPromptAndContinuation) {
  const RunResult r = run("generate " + kModel + " --prompt 'Hello world' --max-tokens 5 --temperature 0.8 --seed 1");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out.rfind("Hello world", 0), 0u) << r.out;
  EXPECT_EQ(run("generate " + kModel + " --prompt 'Hello world' --max-tokens 5 --temperature 0.8 --seed 1").out, r.out);
}

TEST(Cli, DemoModelContinuesTheReadmePromptAsTransformersDoes) {
  // README / scripts/demo.sh: the bundled trained model completes "def fibonacci(n):".
  const nlohmann::json g = test::read_json(test::fixture("tide-demo/golden.json"));
  const auto& c = g["generate"][0];
  ASSERT_EQ(c["prompt"], "def fibonacci(n):");
  const std::string model = "--model " + test::bundled_model("tide-demo").string();
  const RunResult r = run("generate " + model + " --prompt 'def fibonacci(n):' --max-tokens 64 --ignore-eos --json");
  ASSERT_EQ(r.status, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["prompt_ids"], c["prompt_ids"]);
  const auto want = test::ids_of(c["greedy_ids"]);
  EXPECT_EQ(j["ids"].get<std::vector<int32_t>>(), std::vector<int32_t>(want.begin(), want.begin() + 64));

  // demo.sh's own flags: the prompt, then a continuation that ends at the model's end of text or the limit.
  const RunResult demo = run("generate " + model + " --prompt 'def fibonacci(n):' --max-tokens 200 --repetition-penalty 1.2");
  ASSERT_EQ(demo.status, 0) << demo.out;
  EXPECT_EQ(demo.out.rfind("def fibonacci(n):\n", 0), 0u) << demo.out;
  EXPECT_GT(demo.out.size(), 60u) << demo.out;
}

TEST(Cli, PromptsFileRunsPromptsInOneEngineWithReuse) {
  const nlohmann::json g = test::read_json(test::fixture("cohere2-tiny/golden.json"));
  const auto& c = g["prefix_sharing"][1];  // 49 shared tokens
  test::TempDir dir;
  const auto file = dir.path() / "prompts.jsonl";
  std::ofstream(file) << nlohmann::json{{"prompt_ids", c["a_ids"]}, {"max_tokens", 2}}.dump() << "\n\n"
                      << nlohmann::json{{"prompt_ids", c["b_ids"]}, {"max_tokens", 16}}.dump() << "\n"
                      << nlohmann::json{{"prompt", "Hello"}}.dump() << "\n";
  const RunResult r = run("generate " + kModel + " --prompts-file " + file.string() + " --json --ignore-eos --max-tokens 3");
  ASSERT_EQ(r.status, 0) << r.out;
  std::vector<nlohmann::json> lines;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0]["ids"].size(), 2u);
  EXPECT_EQ(lines[0]["cached_tokens"], 0);
  EXPECT_EQ(lines[1]["ids"], c["b_greedy_ids"]);
  EXPECT_EQ(lines[1]["cached_tokens"], 48);
  EXPECT_EQ(lines[2]["ids"].size(), 3u);  // the default --max-tokens
  // The engine's steps so far (cumulative): a prompt's step and one per further token at least, each request.
  EXPECT_GE(lines[1]["engine"]["steps"].get<int64_t>(), lines[0]["engine"]["steps"].get<int64_t>() + 16);
  for (const char* key : {"step_seconds", "schedule_seconds", "execute_seconds", "output_seconds"}) {
    EXPECT_GT(lines[2]["engine"][key].get<double>(), 0.0) << key;
  }
  // A forward pass per step; the CPU backend records no graphs.
  EXPECT_EQ(lines[2]["engine"]["forward_passes"], lines[2]["engine"]["steps"]);
  EXPECT_EQ(lines[2]["engine"]["graph_replays"], 0);
  EXPECT_EQ(lines[2]["engine"]["graphs_recorded"], 0);
  const nlohmann::json& kv = lines[1]["kv"];
  EXPECT_EQ(kv["block_size"], 16);
  for (const char* key : {"block_bytes", "capacity_blocks", "host_capacity_blocks", "in_use_blocks", "cached_blocks",
                          "peak_in_use_blocks"}) {
    EXPECT_TRUE(kv[key].is_number_integer()) << key;
  }
  EXPECT_GT(kv["capacity_blocks"].get<int>(), 0);
  EXPECT_GT(kv["cached_blocks"].get<int>(), 0);
  // The tiny model's 6 sliding and 2 global layers: groups of 2 layers, one KV block size for all.
  ASSERT_EQ(kv["groups"].size(), 4u);
  for (int g = 0; g < 3; ++g) EXPECT_EQ(kv["groups"][g]["window"], 16);
  EXPECT_TRUE(kv["groups"][3]["window"].is_null());
  for (const nlohmann::json& group : kv["groups"]) {
    EXPECT_EQ(group["num_layers"], 2);
    for (const char* key : {"in_use_blocks", "cached_blocks", "host_blocks", "peak_in_use_blocks", "queries", "hits"}) {
      EXPECT_TRUE(group[key].is_number_integer()) << key;
    }
  }
  EXPECT_GT(kv["groups"][3]["hits"].get<int>(), 0);

  const RunResult no_reuse =
      run("generate " + kModel + " --prompts-file " + file.string() + " --json --ignore-eos --no-prefix-caching");
  std::istringstream in2(no_reuse.out);
  std::string first, second;
  std::getline(in2, first);
  std::getline(in2, second);
  EXPECT_EQ(nlohmann::json::parse(second)["cached_tokens"], 0);
  EXPECT_EQ(nlohmann::json::parse(second)["ids"], c["b_greedy_ids"]);
}

std::vector<nlohmann::json> json_lines(const std::string& out) {
  std::vector<nlohmann::json> lines;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

TEST(Cli, ConcurrentPromptsMatchTheSequentialRun) {
  const nlohmann::json g = test::read_json(test::fixture("cohere2-tiny/golden.json"));
  test::TempDir dir;
  const auto file = dir.path() / "prompts.jsonl";
  {
    std::ofstream out(file);
    for (const auto& c : g["generate"]) out << nlohmann::json{{"prompt_ids", c["prompt_ids"]}, {"max_tokens", 40}}.dump() << "\n";
    for (const auto& c : g["prefix_sharing"]) out << nlohmann::json{{"prompt_ids", c["b_ids"]}}.dump() << "\n";
    out << nlohmann::json{{"prompt", "Hello"}, {"max_tokens", 0}}.dump() << "\n";
    out << nlohmann::json{{"prompt", "The quick brown fox"}, {"max_tokens", 64}}.dump() << "\n";
  }
  for (const std::string extra : {"", " --ignore-eos"}) {
    const std::string args = "generate " + kModel + " --prompts-file " + file.string() + " --json --max-tokens 16" + extra;
    const RunResult seq = run(args);
    const RunResult conc = run(args + " --concurrent --max-num-seqs 3 --max-num-batched-tokens 48");
    ASSERT_EQ(seq.status, 0) << seq.out;
    ASSERT_EQ(conc.status, 0) << conc.out;
    const std::vector<nlohmann::json> a = json_lines(seq.out), b = json_lines(conc.out);
    ASSERT_EQ(a.size(), 7u);
    ASSERT_EQ(b.size(), a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(b[i]["prompt_ids"], a[i]["prompt_ids"]) << i;
      EXPECT_EQ(b[i]["ids"], a[i]["ids"]) << i << extra;
      EXPECT_EQ(b[i]["text"], a[i]["text"]) << i;
      EXPECT_EQ(b[i]["finish_reason"], a[i]["finish_reason"]) << i << extra;
      EXPECT_TRUE(b[i]["kv"].is_object());
    }
    EXPECT_EQ(b[0]["ids"], nlohmann::json(std::vector<int32_t>(g["generate"][0]["greedy_ids"].begin(),
                                                                g["generate"][0]["greedy_ids"].begin() + 40)));
    EXPECT_EQ(b[0]["finish_reason"], "length");
    EXPECT_EQ(b[2]["ids"], g["prefix_sharing"][0]["b_greedy_ids"]);
    EXPECT_EQ(b[5]["ids"].size(), 0u);
    EXPECT_EQ(b[5]["finish_reason"], "length");
    if (!extra.empty()) {
      for (const auto& line : b) EXPECT_EQ(line["finish_reason"], "length");
    }
  }
  // Plain output: each prompt with its continuation, in the file's order.
  const RunResult plain = run("generate " + kModel + " --prompts-file " + file.string() + " --concurrent --max-tokens 4");
  ASSERT_EQ(plain.status, 0) << plain.out;
  EXPECT_NE(plain.out.find("The quick brown fox"), std::string::npos) << plain.out;
}

TEST(Cli, BadPromptsFilesNameTheLine) {
  test::TempDir dir;
  struct Case {
    std::string content, needle;
  };
  for (const Case& c : std::vector<Case>{{"{\"prompt_ids\": [5, 6]}\nnot json\n", ":2"},
                                         {"{\"prompt_ids\": [5, -3]}\n", "prompt_ids"},
                                         {"{\"prompt\": 5}\n", "prompt"},
                                         {"{\"prompt\": \"a\", \"prompt_ids\": [5]}\n", "exactly one"},
                                         {"{\"prompt\": \"a\", \"max_tokens\": -1}\n", "max_tokens"},
                                         {"\n\n", "no prompt"}}) {
    const auto file = dir.path() / "p.jsonl";
    std::ofstream(file) << c.content;
    const RunResult r = run("generate " + kModel + " --prompts-file " + file.string());
    EXPECT_GT(r.status, 0) << c.content;
    EXPECT_NE(r.out.find(c.needle), std::string::npos) << c.content << "\n" << r.out;
  }
  const RunResult missing = run("generate " + kModel + " --prompts-file /nonexistent.jsonl");
  EXPECT_NE(missing.out.find("/nonexistent.jsonl"), std::string::npos);
}

TEST(Cli, LogitsLastAndAllPositions) {
  const RunResult last = run("logits " + kModel + " --prompt-ids 5,17,42");
  ASSERT_EQ(last.status, 0) << last.out;
  const nlohmann::json j = nlohmann::json::parse(last.out);
  ASSERT_EQ(j["logits"].size(), 1u);
  EXPECT_EQ(j["logits"][0].size(), 1024u);
  const RunResult all = run("logits " + kModel + " --prompt-ids 5,17,42 --all-positions --block-size 2");
  const nlohmann::json k = nlohmann::json::parse(all.out);
  ASSERT_EQ(k["logits"].size(), 3u);
  for (size_t i = 0; i < 1024; ++i) EXPECT_NEAR(k["logits"][2][i].get<double>(), j["logits"][0][i].get<double>(), 1e-5);
}

TEST(Cli, TokenizeAndDetokenizeRoundTrip) {
  const RunResult tok = run("tokenize " + kModel + " --text 'Hi there 123'");
  ASSERT_EQ(tok.status, 0) << tok.out;
  const auto ids = nlohmann::json::parse(tok.out)["ids"].get<std::vector<int32_t>>();
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], 5);  // <BOS_TOKEN> from the post-processor
  const RunResult no_special = run("tokenize " + kModel + " --text 'Hi there 123' --no-special");
  EXPECT_EQ(nlohmann::json::parse(no_special.out)["ids"].size(), ids.size() - 1);
  std::string list;
  for (int32_t id : ids) list += (list.empty() ? "" : ",") + std::to_string(id);
  EXPECT_EQ(nlohmann::json::parse(run("detokenize " + kModel + " --ids " + list + " --skip-special").out)["text"],
            "Hi there 123");
  EXPECT_EQ(nlohmann::json::parse(run("detokenize " + kModel + " --ids " + list).out)["text"],
            "<BOS_TOKEN>Hi there 123");
}

TEST(Cli, BadInputIsAClearErrorNotACrash) {
  struct Case {
    std::string args, needle;
  };
  for (const Case& c : std::vector<Case>{
           {"generate --model /nonexistent --prompt hi", "/nonexistent"},
           {"generate " + kModel + " --prompt-ids 5,x,7", "--prompt-ids"},
           {"generate " + kModel + " --prompt-ids 5,99999", "99999"},
           {"generate " + kModel + " --prompt-ids 5 --max-tokens 100000", "maximum length"},
           {"generate " + kModel, "--prompt"},
           {"generate " + kModel + " --prompt hi --top-p 2", "top-p"},
           {"generate " + kModel + " --prompt hi --min-p 1.5", "--min-p"},
           {"generate " + kModel + " --prompt hi --repetition-penalty 0", "--repetition-penalty"},
           {"generate " + kModel + " --prompt hi --presence-penalty 3", "--presence-penalty"},
           {"generate " + kModel + " --prompt hi --frequency-penalty -2.5", "--frequency-penalty"},
           {"generate " + kModel + " --prompt hi --block-size 0", "block-size"},
           {"generate " + kModel + " --prompt hi --concurrent --max-num-seqs 0", "--max-num-seqs"},
           {"generate " + kModel + " --prompt hi --concurrent --max-num-batched-tokens -4", "--max-num-batched-tokens"},
           {"generate " + kModel + " --prompt hi --kv-cache-memory 100", "kv-cache-memory"},
           {"generate " + kModel + " --prompt hi --kv-cache-memory lots", "kv-cache-memory"},
           {"logits " + kModel + " --prompt-ids ''", "--prompt-ids"},
           {"detokenize " + kModel + " --ids 5,100000", "100000"},
           {"generate " + kModel + " --prompt hi --device tpu", "tpu"},
           {"generate " + kModel + " --prompt hi --n 0", "--n"},
           {"generate " + kModel + " --prompt hi --logprobs 21", "--logprobs"},
           {"generate " + kModel + " --prompt hi --stop ''", "stop"},
           {"generate " + kModel + " --prompt hi --quantization int4", "--quantization"},
           {"serve " + test::fixture("cohere2-tiny").string() + " --quantization int4", "--quantization"},
           {"frobnicate", "frobnicate"},
       }) {
    const RunResult r = run(c.args);
    EXPECT_GT(r.status, 0) << c.args << "\n" << r.out;  // an exit status, not a signal
    EXPECT_NE(r.out.find(c.needle), std::string::npos) << c.args << "\n" << r.out;
  }
}

// Bad flag values are usage errors (exit status 2) whose message says the accepted values in words, never
// CLI11's range message with the 309 digits of the largest double.
TEST(Cli, BadFlagValuesSayTheRangeInWordsWithExitStatus2) {
  const std::string gen = "generate " + kModel + " --prompt hi";
  struct Case {
    std::string args, message;  // the message: the first line after "tide: error: "
  };
  for (const Case& c : std::vector<Case>{
           {gen + " --block-size 0", "--block-size must be a positive power of two ≤ 256, got 0"},
           {gen + " --block-size 48", "--block-size must be a positive power of two ≤ 256, got 48"},
           {gen + " --max-tokens -1", "--max-tokens must be an integer in [0, 16777216], got -1"},
           {gen + " --max-tokens 1e3", "--max-tokens must be an integer in [0, 16777216], got 1e3"},
           {gen + " --temperature inf", "--temperature must be a finite number ≥ 0, got inf"},
           {gen + " --temperature nan", "--temperature must be a finite number ≥ 0, got nan"},
           {gen + " --temperature -1", "--temperature must be a finite number ≥ 0, got -1"},
           {gen + " --top-p 0", "--top-p must be a finite number in (0, 1], got 0"},
           {gen + " --top-k -1", "--top-k must be an integer ≥ 0, got -1"},
           {gen + " --repetition-penalty 0", "--repetition-penalty must be a finite number > 0, got 0"},
           {gen + " --seed -1", "--seed must be an integer in [0, 18446744073709551615], got -1"},
           {gen + " --n 0", "--n must be an integer in [1, 128], got 0"},
           {gen + " --logprobs 21", "--logprobs must be an integer in [-1, 20], got 21"},
           {gen + " --min-tokens -2", "--min-tokens must be an integer in [0, 16777216], got -2"},
           {gen + " --max-num-seqs 0", "--max-num-seqs must be an integer in [1, 65536], got 0"},
           {gen + " --max-model-len -1", "--max-model-len must be an integer in [0, 16777216], got -1"},
           {gen + " --gpu-memory-utilization 1.5", "--gpu-memory-utilization must be a finite number in [0.01, 1], got 1.5"},
           {gen + " --kv-cache-memory lots",
            "--kv-cache-memory must be a number of bytes ≥ 0 (plain, or with a unit: 512MiB, 2GB, 1TiB), got lots"},
           {gen + " --device tpu", "--device must be one of cpu, cuda, auto, got 'tpu'"},
           {gen + " --quantization int4", "--quantization must be fp8, got 'int4'"},
           {gen + " --load-format pt", "--load-format must be one of auto, dummy, got 'pt'"},
           {gen + " --kv-cache-dtype int8", "--kv-cache-dtype must be one of auto, fp8, fp8_e4m3, got 'int8'"},
           {gen + " --stop ''", "--stop is empty: a stop string needs at least one character"},
           {"generate " + kModel + " --prompt ''",
            "--prompt is empty: the prompt has no text to continue (give text, or --prompt-ids)"},
           {"generate " + kModel, "generate: no prompt: give --prompt TEXT, --prompt-ids IDS or --prompts-file FILE"},
           {gen + " --no-such-flag", "The following argument was not expected: --no-such-flag"},
           {"logits " + kModel + " --prompt-ids 5 --block-size 0", "--block-size must be a positive power of two ≤ 256, got 0"},
           {"logits " + kModel + " --prompt-ids ''", "--prompt-ids is empty: give token ids separated by commas, e.g. 5,17,42"},
           {"detokenize " + kModel + " --ids ''", "--ids is empty: give token ids separated by commas, e.g. 5,17,42"},
           {"quantize " + kModel + " --out /tmp/x --shard-size 0",
            "--shard-size must be a number of bytes ≥ 1 (plain, or with a unit: 512MiB, 2GB, 1TiB), got 0"},
           {"serve " + kModel + " --port 70000", "--port must be an integer in [0, 65535], got 70000"},
           {"serve " + kModel + " --drain-timeout inf", "--drain-timeout must be a finite number in (0, 86400], got inf"},
           {"serve " + kModel + " --max-pending-samples 0",
            "--max-pending-samples must be an integer in [1, 1073741824], got 0"},
       }) {
    const RunResult r = run(c.args);
    EXPECT_EQ(r.status, 2) << c.args << "\n" << r.out;
    EXPECT_EQ(r.out.substr(0, r.out.find('\n')), "tide: error: " + c.message) << c.args;
    EXPECT_EQ(r.out.find("179769"), std::string::npos) << r.out;
  }
  // Sizes with units are accepted; what the engine then refuses is not a usage error (exit status 1).
  const RunResult small = run(gen + " --kv-cache-memory 1KiB");
  EXPECT_EQ(small.status, 1) << small.out;
  EXPECT_NE(small.out.find("--kv-cache-memory of 1024 bytes holds no KV block"), std::string::npos) << small.out;
}

TEST(Cli, HelpOnEveryCommand) {
  for (const char* cmd : {"", "generate", "logits", "tokenize", "detokenize"}) {
    const RunResult r = run(std::string(cmd) + " --help");
    EXPECT_EQ(r.status, 0) << cmd;
    EXPECT_NE(r.out.find("--"), std::string::npos) << cmd;
  }
}

TEST(Cli, SamplingFlagsAreDocumentedAndSeededRunsRepeat) {
  const RunResult help = run("generate --help");
  for (const char* flag : {"--temperature", "--top-k", "--top-p", "--min-p", "--presence-penalty",
                           "--frequency-penalty", "--repetition-penalty", "--seed"}) {
    EXPECT_NE(help.out.find(flag), std::string::npos) << flag;
  }
  const std::string args = "generate " + kModel + " --prompt 'Hello world' --max-tokens 12 --ignore-eos --json "
                           "--temperature 0.9 --top-k 40 --top-p 0.95 --min-p 0.02 --repetition-penalty 1.2 "
                           "--presence-penalty 0.5 --frequency-penalty 0.3 --seed 7";
  const RunResult a = run(args), b = run(args);
  ASSERT_EQ(a.status, 0) << a.out;
  EXPECT_EQ(nlohmann::json::parse(a.out)["ids"], nlohmann::json::parse(b.out)["ids"]);
  EXPECT_EQ(nlohmann::json::parse(a.out)["ids"].size(), 12u);
}

TEST(Cli, StopStringsSamplesAndLogprobsInTheJson) {
  const std::string base = "generate " + kModel + " --prompt 'Hello world' --max-tokens 12 --ignore-eos --json";
  const RunResult full = run(base);
  ASSERT_EQ(full.status, 0) << full.out;
  const std::string text = nlohmann::json::parse(full.out)["text"];
  ASSERT_GE(text.size(), 4u);
  // A stop string from the middle of the text: the output ends before it, with "stop".
  const std::string stop = text.substr(text.size() / 2, 2);
  const RunResult stopped = run(base + " --stop '" + stop + "' --stop 'never here'");
  ASSERT_EQ(stopped.status, 0) << stopped.out;
  const nlohmann::json s = nlohmann::json::parse(stopped.out);
  EXPECT_EQ(s["finish_reason"], "stop");
  EXPECT_EQ(s["text"], text.substr(0, text.find(stop)));
  // Plain mode streams the same text.
  const RunResult plain = run("generate " + kModel + " --prompt 'Hello world' --max-tokens 12 --ignore-eos --stop '" + stop + "'");
  ASSERT_EQ(plain.status, 0) << plain.out;
  EXPECT_NE(plain.out.find("Hello world" + s["text"].get<std::string>() + "\n"), std::string::npos) << plain.out;

  const RunResult many = run(base + " --n 3 --temperature 1 --seed 5 --logprobs 2");
  ASSERT_EQ(many.status, 0) << many.out;
  const nlohmann::json m = nlohmann::json::parse(many.out);
  ASSERT_EQ(m["samples"].size(), 3u);
  EXPECT_EQ(m["samples"][0]["ids"], m["ids"]);
  for (const auto& sample : m["samples"]) {
    ASSERT_EQ(sample["logprobs"].size(), 12u);
    EXPECT_EQ(sample["logprobs"][0]["top"].size(), 2u);
    EXPECT_LE(sample["logprobs"][0]["logprob"].get<double>(), 0.0);
  }
}

}  // namespace
}  // namespace tide

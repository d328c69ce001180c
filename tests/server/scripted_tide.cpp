// tide_scripted: the tide program's `serve` command on a backend whose sample op is scripted, so that the server
// tests can make a model "write" Cohere's tool calls, reasoning and citations through the whole stack (engine,
// detokenization, parsers, API shapes) with a tiny random-weight fixture.
//
//   tide_scripted --script FILE serve MODEL_DIR [serve flags]
//
// FILE: {"<seed>": "text", ...}. A sampled row whose random stream is a request's `seed` (sample 0 of a request
// with that seed) produces the text's tokens (the model folder's tokenizer, special tokens as single ids) one per
// draw, then the end-of-sequence token; other rows sample as the model does, and a forced token (a thinking
// budget's) is kept. Test-only: not part of the product.
#include <CLI/CLI.hpp>

#include <fstream>
#include <iostream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "apps/tide/commands.h"
#include "backend/forwarding_backend.h"
#include "core/error.h"
#include "runtime/sampling.h"
#include "tokenizer/tokenizer.h"

namespace tide {
namespace {

using Scripts = std::unordered_map<uint64_t, std::vector<int32_t>>;

// Owns the wrapped backend: the base-from-member idiom, so that ForwardingBackend's reference outlives nothing.
struct OwnedBackend {
  std::unique_ptr<Backend> owned;
};

class ScriptedBackend : private OwnedBackend, public ForwardingBackend {
 public:
  ScriptedBackend(std::unique_ptr<Backend> inner, Scripts scripts, int32_t eos)
      : OwnedBackend{std::move(inner)}, ForwardingBackend(*owned), scripts_(std::move(scripts)), eos_(eos) {}

  void sample(Tensor out_ids, Tensor logits, const SamplingBatch& batch) override {
    ForwardingBackend::sample(out_ids, logits, batch);
    std::vector<int32_t> ids(batch.rows.size());
    download(out_ids, ids.data());
    bool changed = false;
    for (size_t r = 0; r < batch.rows.size(); ++r) {
      const auto it = scripts_.find(batch.rows[r].seed);
      if (it == scripts_.end()) continue;
      const auto draw = static_cast<size_t>(batch.rows[r].counter);
      // A forced token (the thinking budget's closing marker) wins over the script, as over the model.
      if (forced(batch, r)) continue;
      ids[r] = draw < it->second.size() ? it->second[draw] : eos_;
      changed = true;
    }
    if (changed) upload_into(out_ids, ids.data());
  }

 private:
  static bool forced(const SamplingBatch& batch, size_t row) {
    if (batch.history_starts.empty()) return false;
    for (int32_t i = batch.history_starts[row]; i < batch.history_starts[row + 1]; ++i) {
      if (batch.history[static_cast<size_t>(i)].bias == kForcedTokenBias) return true;
    }
    return false;
  }

  Scripts scripts_;
  int32_t eos_;
};

Scripts load_scripts(const std::string& file, const Tokenizer& tokenizer) {
  std::ifstream in(file);
  if (!in) fail("cannot read the script file {}", file);
  const nlohmann::json json = nlohmann::json::parse(in);
  Scripts scripts;
  for (const auto& [seed, text] : json.items()) {
    scripts[std::stoull(seed)] = tokenizer.encode(text.get<std::string>(), /*add_special_tokens=*/false);
  }
  return scripts;
}

// The id that ends generation: generation_config.json's eos_token_id (the first of a list).
int32_t stop_id(const std::string& model) {
  std::ifstream in(model + "/generation_config.json");
  if (!in) fail("{} has no generation_config.json", model);
  const nlohmann::json config = nlohmann::json::parse(in);
  const nlohmann::json& eos = config.at("eos_token_id");
  return eos.is_array() ? eos.at(0).get<int32_t>() : eos.get<int32_t>();
}

}  // namespace
}  // namespace tide

int main(int argc, char** argv) {
  CLI::App app{"tide serve with a scripted sample op (server tests)", "tide_scripted"};
  app.require_subcommand(1);
  std::string script_file;
  app.add_option("--script", script_file, "JSON {seed: text}")->required();
  tide::cli::add_serve_command(app, [&script_file](std::unique_ptr<tide::Backend> backend, const std::string& model) {
    const tide::Tokenizer tokenizer = tide::Tokenizer::from_dir(model);
    return std::make_unique<tide::ScriptedBackend>(std::move(backend), tide::load_scripts(script_file, tokenizer),
                                                   tide::stop_id(model));
  });
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::cerr << "tide_scripted: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

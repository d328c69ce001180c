// Fuzzes config.json parsing (ModelConfig::from_json, model/config.h): the input is the file's text. A config
// the parser accepts must describe a consistent layer layout: every layer in exactly one group, at its slot,
// groups no larger than a KV block's layer slots, and sizes that multiply out.
#include "model/config.h"

#include <set>

#include "fuzz/fuzz_util.h"

namespace {

void check_layout(const tide::ModelConfig& c) {
  FUZZ_CHECK(c.num_layers > 0 && static_cast<int64_t>(c.layers.size()) == c.num_layers);
  FUZZ_CHECK(c.hidden_size > 0 && c.num_heads > 0 && c.num_heads_kv > 0 && c.head_dim > 0);
  FUZZ_CHECK(c.head_dim * c.num_heads == c.hidden_size);
  FUZZ_CHECK(c.layers_per_kv_block > 0 && !c.groups.empty());
  std::set<int> seen;
  for (size_t g = 0; g < c.groups.size(); ++g) {
    const tide::LayerGroup& group = c.groups[g];
    FUZZ_CHECK(group.num_layers() > 0 && group.num_layers() <= c.layers_per_kv_block);
    for (int slot = 0; slot < group.num_layers(); ++slot) {
      const int layer = group.layers[slot];
      FUZZ_CHECK(layer >= 0 && layer < c.num_layers && seen.insert(layer).second);
      const tide::LayerSpec& spec = c.layers[layer];
      FUZZ_CHECK(spec.group_idx == static_cast<int>(g) && spec.layer_idx_in_group == slot);
      FUZZ_CHECK(spec.window == group.window && spec.window >= 0);
    }
  }
  FUZZ_CHECK(static_cast<int64_t>(seen.size()) == c.num_layers);
  FUZZ_CHECK(c.group_windows().size() == c.groups.size());
  FUZZ_CHECK(c.qkv_size() > 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tide::fuzz::accepted([&] {
    const nlohmann::json json = nlohmann::json::parse(tide::fuzz::as_text(data, size));
    const tide::ModelConfig config = tide::ModelConfig::from_json(json, "config.json");
    check_layout(config);
    const std::vector<float> inv_freq = config.rope_inv_freq();
    FUZZ_CHECK(static_cast<int64_t>(inv_freq.size()) == config.head_dim / 2);
  });
  return 0;
}

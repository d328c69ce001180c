#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <unordered_set>

#include "core/error.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/stand_in_vocab.h"
#include "tokenizer/utf8.h"

namespace tide {
namespace jf = json_fields;

struct Tokenizer::Impl {
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  BpeModel model;
  AddedVocabulary added;
  PostProcessor post_processor;
  bool byte_level_decoder = false;  // false: no decoder, tokens are joined with spaces (HF's default)

  // Indexed by id; `present` is false for ids that neither the vocabulary nor the added tokens use.
  std::vector<std::string> tokens;       // added tokens take precedence, as in HF's id_to_token
  std::vector<std::string> token_bytes;  // what each token contributes to decode()
  std::vector<bool> present;
  std::vector<bool> special;

  std::optional<int32_t> bos_id;
  std::optional<int32_t> eos_id;
  bool add_bos_token = false;
  bool stand_in = false;  // Tokenizer::stand_in: encode() and token_to_id() follow stand_in_vocab.h

  void check_id(int32_t id, std::string_view what) const {
    if (id < 0 || static_cast<size_t>(id) >= tokens.size()) {
      fail("{}: token id {} is out of range [0, {})", what, id, tokens.size());
    }
    if (!present[static_cast<size_t>(id)]) fail("{}: token id {} has no token in the vocabulary", what, id);
  }
  void build_token_tables();
};

// Fills the per-id tables: vocabulary tokens, overridden by added tokens (HF looks those up first), their
// decoded bytes, and the special flags.
void Tokenizer::Impl::build_token_tables() {
  int32_t max_id = model.max_id();
  for (const AddedToken& token : added.tokens()) max_id = std::max(max_id, token.id);
  const auto size = static_cast<size_t>(max_id + 1);
  tokens.resize(size);
  present.resize(size, false);
  special.resize(size, false);
  for (size_t id = 0; id < size; ++id) {
    if (const std::string* token = model.id_to_token(static_cast<int32_t>(id))) {
      tokens[id] = *token;
      present[id] = true;
    }
  }
  std::unordered_set<std::string> special_contents;
  for (const AddedToken& token : added.tokens()) {
    tokens[static_cast<size_t>(token.id)] = token.pattern;
    present[static_cast<size_t>(token.id)] = true;
    if (token.special) special_contents.insert(token.content);
  }
  // HF decides "special" by the decoded string, so a vocabulary entry spelled like a special token counts too.
  token_bytes.resize(size);
  for (size_t id = 0; id < size; ++id) {
    special[id] = present[id] && special_contents.contains(tokens[id]);
    if (!byte_level_decoder) {
      token_bytes[id] = tokens[id];
    } else {
      byte_level::decode_token(tokens[id], token_bytes[id]);
    }
  }
}

namespace {

constexpr const char* kTokenizerFile = "tokenizer.json";
constexpr const char* kConfigFile = "tokenizer_config.json";

bool parse_byte_level_decoder(const jf::Json* decoder, const std::string& path) {
  if (decoder == nullptr) return false;
  const std::string& type = jf::type_of(*decoder, path);
  if (type != "ByteLevel") {
    fail("{}: unsupported decoder type '{}' (tide supports ByteLevel, null)", jf::child(path, "type"), type);
  }
  return true;
}

// "bos_token" / "eos_token" of tokenizer_config.json: a string or an AddedToken object {"content": ...}.
std::optional<int32_t> config_token(const jf::Json& config, std::string_view key, const Tokenizer& tokenizer) {
  const std::string root = std::string(kConfigFile) + ":";
  const jf::Json* value = jf::find(config, key, root);
  if (value == nullptr) return std::nullopt;
  const std::string path = jf::child(root, key);
  const std::string& content =
      value->is_object() ? jf::as_string(jf::require(*value, "content", path), jf::child(path, "content"))
                         : jf::as_string(*value, path);
  const auto id = tokenizer.token_to_id(content);
  if (!id) fail("{} = '{}' is not a token of {}", path, content, kTokenizerFile);
  return id;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open {}", path.string());
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) fail("cannot read {}", path.string());
  return std::move(contents).str();
}

}  // namespace

Tokenizer Tokenizer::from_json(std::string_view tokenizer_json, std::string_view tokenizer_config_json) {
  const std::string root = std::string(kTokenizerFile) + ":";
  const jf::Json json = jf::parse(tokenizer_json, kTokenizerFile);
  jf::as_object(json, kTokenizerFile);
  auto impl = std::make_shared<Impl>();
  // Truncation and padding are ignored: transformers overrides them on every call, and inference never wants
  // a prompt silently cut.
  impl->normalizer = Normalizer::from_json(jf::find(json, "normalizer", root), jf::child(root, "normalizer"));
  impl->pre_tokenizer =
      PreTokenizer::from_json(jf::find(json, "pre_tokenizer", root), jf::child(root, "pre_tokenizer"));
  impl->model = BpeModel::from_json(jf::require(json, "model", root), jf::child(root, "model"));
  impl->added = AddedVocabulary::from_json(jf::find(json, "added_tokens", root), jf::child(root, "added_tokens"),
                                           impl->model, impl->normalizer);
  impl->post_processor =
      PostProcessor::from_json(jf::find(json, "post_processor", root), jf::child(root, "post_processor"));
  impl->byte_level_decoder = parse_byte_level_decoder(jf::find(json, "decoder", root), jf::child(root, "decoder"));

  impl->build_token_tables();

  const auto& prefix = impl->post_processor.prefix();
  impl->bos_id = prefix.empty() ? std::nullopt : std::optional<int32_t>(prefix.front());
  impl->add_bos_token = !prefix.empty();
  if (!tokenizer_config_json.empty()) {
    const Tokenizer partial(impl);
    const jf::Json config = jf::parse(tokenizer_config_json, kConfigFile);
    jf::as_object(config, kConfigFile);
    if (const auto bos = config_token(config, "bos_token", partial)) impl->bos_id = bos;
    impl->eos_id = config_token(config, "eos_token", partial);
    impl->add_bos_token = jf::bool_or(config, "add_bos_token", impl->add_bos_token, std::string(kConfigFile) + ":");
  }
  return Tokenizer(std::move(impl));
}

namespace {

// config.json's vocab_size, for the stand-in tokenizer of a folder without one.
int32_t config_vocab_size(const std::filesystem::path& path) {
  const jf::Json config = jf::parse(read_file(path), path.string());
  const std::string root = path.string() + ":";
  jf::as_object(config, root);
  const jf::Json& size = jf::require(config, "vocab_size", root);
  if (!size.is_number_integer() || size.get<int64_t>() < 1 || size.get<int64_t>() > jf::kMaxTokenId + 1) {
    fail("{} must be an integer in [1, {}] for the stand-in tokenizer", jf::child(root, "vocab_size"), jf::kMaxTokenId + 1);
  }
  return size.get<int32_t>();
}

}  // namespace

Tokenizer Tokenizer::stand_in(int32_t vocab_size) {
  if (vocab_size < 1 || vocab_size > jf::kMaxTokenId + 1) fail("stand-in tokenizer: vocabulary of {} ids", vocab_size);
  auto impl = std::make_shared<Impl>();
  impl->stand_in = true;
  impl->byte_level_decoder = true;  // token bytes concatenated, no spaces between tokens
  const auto size = static_cast<size_t>(vocab_size);
  impl->tokens.resize(size);
  impl->token_bytes.resize(size);
  impl->present.assign(size, true);
  impl->special.assign(size, false);
  for (int32_t id = 0; id < vocab_size; ++id) {
    impl->tokens[static_cast<size_t>(id)] = stand_in_vocab::token_name(id);
    impl->token_bytes[static_cast<size_t>(id)] = stand_in_vocab::token_text(id);
  }
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_dir(const std::filesystem::path& dir) {
  const std::filesystem::path tokenizer_path = dir / kTokenizerFile;
  const std::filesystem::path config_path = dir / kConfigFile;
  const bool has_tokenizer_file = std::any_of(std::begin(kTokenizerFileNames), std::end(kTokenizerFileNames),
                                              [&](std::string_view name) { return std::filesystem::exists(dir / name); });
  if (!has_tokenizer_file && std::filesystem::exists(dir / "config.json")) {
    return stand_in(config_vocab_size(dir / "config.json"));
  }
  const std::string tokenizer_json = read_file(tokenizer_path);
  const std::string config_json = std::filesystem::exists(config_path) ? read_file(config_path) : std::string();
  try {
    return from_json(tokenizer_json, config_json);
  } catch (const Error& e) {
    fail("{}: {}", dir.string(), e.what());
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  const size_t bad = utf8::find_invalid(text);
  if (bad != utf8::kValid) {
    fail("Tokenizer::encode: input text is not valid UTF-8 (byte 0x{:02X} at offset {})",
         static_cast<unsigned char>(text[bad]), bad);
  }
  const Impl& m = impl();
  if (m.stand_in) return stand_in_vocab::encode(text, vocab_size());
  std::vector<int32_t> ids;
  std::vector<std::string> words;
  // Added tokens are cut out of the raw text first; only the text between them is normalized, then searched
  // for the added tokens that match normalized text, then pre-tokenized and run through BPE.
  for (const TextSegment& raw : m.added.split(text, /*normalized=*/false)) {
    if (raw.added_id >= 0) {
      ids.push_back(raw.added_id);
      continue;
    }
    const std::string normalized = m.normalizer.apply(raw.text);
    for (const TextSegment& segment : m.added.split(normalized, /*normalized=*/true)) {
      if (segment.added_id >= 0) {
        ids.push_back(segment.added_id);
        continue;
      }
      words.clear();
      m.pre_tokenizer.split(segment.text, words);
      for (const std::string& word : words) m.model.tokenize(word, ids);
    }
  }
  return add_special_tokens ? m.post_processor.apply(std::move(ids)) : ids;
}

void Tokenizer::append_token_bytes(int32_t id, bool skip_special_tokens, bool& first, std::string& bytes) const {
  const Impl& m = impl();
  m.check_id(id, "Tokenizer::decode");
  const auto index = static_cast<size_t>(id);
  if (skip_special_tokens && m.special[index]) return;
  if (!m.byte_level_decoder && !first) bytes.push_back(' ');
  bytes.append(m.token_bytes[index]);
  first = false;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string bytes;
  bool first = true;
  for (const int32_t id : ids) append_token_bytes(id, skip_special_tokens, first, bytes);
  std::string text;
  utf8::append_lossy(bytes, /*final=*/true, text);
  return text;
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl().tokens.size()); }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (impl().stand_in) return stand_in_vocab::parse_name(token, vocab_size());
  if (const auto id = impl().added.token_to_id(token)) return id;
  return impl().model.token_to_id(token);
}

const std::string& Tokenizer::id_to_token(int32_t id) const {
  impl().check_id(id, "Tokenizer::id_to_token");
  return impl().tokens[static_cast<size_t>(id)];
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl().special.size() && impl().special[static_cast<size_t>(id)];
}

std::optional<int32_t> Tokenizer::bos_id() const { return impl().bos_id; }
std::optional<int32_t> Tokenizer::eos_id() const { return impl().eos_id; }
bool Tokenizer::add_bos_token() const { return impl().add_bos_token; }
bool Tokenizer::is_stand_in() const { return impl().stand_in; }

}  // namespace tide

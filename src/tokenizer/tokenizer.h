// Tokenizer: text <-> token ids for Hugging Face byte-level BPE checkpoints (Cohere / Cohere2), loaded from
// tokenizer.json (+ tokenizer_config.json) and reproducing HF `tokenizers`: added tokens matched in the raw
// text, normalizer, pre-tokenizer, BPE, TemplateProcessing post-processor, ByteLevel decoder with lossy UTF-8.
// Immutable once loaded; copies share the loaded state and may be used from many threads.
// Non-goals: offsets, sentence pairs, truncation / padding, training, chat templates (rendered elsewhere and
// then encoded with add_special_tokens = false). Unsupported tokenizer.json components are load errors.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tide {

// The files whose presence in a model folder means it has a tokenizer (from_dir never falls back to the
// stand-in then): tide reads tokenizer.json and tokenizer_config.json; the others are other libraries' formats.
inline constexpr std::string_view kTokenizerFileNames[] = {"tokenizer.json", "tokenizer_config.json", "tokenizer.model",
                                                           "vocab.json", "merges.txt"};

class Tokenizer {
 public:
  // Reads DIR/tokenizer.json (required) and DIR/tokenizer_config.json (optional). Throws tide::Error naming the
  // file and field on anything missing, malformed or unsupported. A folder with no tokenizer file at all
  // (kTokenizerFileNames) but a config.json gets stand_in(config.json's vocab_size): a config-only folder,
  // as `--load-format dummy` serves.
  static Tokenizer from_dir(const std::filesystem::path& dir);
  // The tokenizer of a model folder without one (stand_in_vocab.h): ids 0-255 are the bytes 0x00-0xFF, every
  // other id N < vocab_size decodes to "<tok_N>", which encode() reads back as N; no special tokens, no BOS or
  // EOS, byte-level concatenation. So id prompts run and every id decodes to text.
  static Tokenizer stand_in(int32_t vocab_size);
  // Same from file contents; an empty `tokenizer_config_json` means there is no config file.
  static Tokenizer from_json(std::string_view tokenizer_json, std::string_view tokenizer_config_json = "");

  // Token ids of `text`, which must be valid UTF-8 (else tide::Error). With add_special_tokens the
  // post-processor's special tokens (e.g. BOS) are added; special tokens written in the text are always
  // recognised, as in HF.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;

  // Text of `ids`: token bytes concatenated, invalid UTF-8 replaced by U+FFFD (one per maximal invalid
  // subpart). skip_special_tokens drops the tokens marked special. Throws tide::Error on an unknown id.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  // Largest id of the vocabulary and the added tokens, plus one.
  int32_t vocab_size() const;
  // Id of a token string (added tokens first, then the vocabulary), or nullopt.
  std::optional<int32_t> token_to_id(std::string_view token) const;
  // Token string of `id` as stored in tokenizer.json (byte-level characters for BPE pieces). Throws on an
  // unknown id.
  const std::string& id_to_token(int32_t id) const;
  // Whether `id` is a special added token (the ones skip_special_tokens drops). False for unknown ids.
  bool is_special(int32_t id) const;

  // tokenizer_config.json "bos_token"; without it, the first special token of the post-processor template.
  std::optional<int32_t> bos_id() const;
  // tokenizer_config.json "eos_token": the token that ends a chat turn. nullopt without a config.
  std::optional<int32_t> eos_id() const;
  // tokenizer_config.json "add_bos_token"; without it, whether the post-processor starts with a special token.
  // Informational: encode() follows tokenizer.json's post-processor, as HF `tokenizers` does.
  bool add_bos_token() const;
  // Whether this is stand_in()'s tokenizer (the programs say so when they load one).
  bool is_stand_in() const;

 private:
  friend class StreamingDecoder;
  struct Impl;

  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  // Appends what `id` contributes to decode()'s byte stream before UTF-8 repair; `first` tracks whether a
  // token was emitted yet (a null decoder joins tokens with spaces). Throws on an unknown id.
  void append_token_bytes(int32_t id, bool skip_special_tokens, bool& first, std::string& bytes) const;
  const Impl& impl() const { return *impl_; }

  std::shared_ptr<const Impl> impl_;
};

}  // namespace tide

// Synthetic tokenizers that isolate one Hugging Face rule each (merge order, pre-tokenizer options,
// added-token flags), properties on random text and ids, and the error paths for malformed or unsupported
// tokenizer.json files.
#include "tokenizer_test_util.h"

namespace tide {
namespace {

using namespace test;

// ---------------------------------------------------------------------------------------------------------
// Synthetic tokenizers: a byte-level vocabulary (ids 0..255) plus the merges and added tokens a test needs.

std::string bl(std::string_view text) {
  std::string out;
  byte_level::encode_bytes(text, out);
  return out;
}

Json byte_level_pre_tokenizer(bool add_prefix_space = false) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", add_prefix_space}, {"trim_offsets", true}, {"use_regex", true}};
}

struct Synthetic {
  Json json;
  Json vocab = Json::object();
  Json merges = Json::array();

  Synthetic() {
    for (int b = 0; b < 256; ++b) vocab[bl(std::string(1, static_cast<char>(b)))] = b;
    json = {{"version", "1.0"},          {"added_tokens", Json::array()},
            {"normalizer", nullptr},      {"pre_tokenizer", byte_level_pre_tokenizer()},
            {"post_processor", nullptr},  {"decoder", {{"type", "ByteLevel"}}}};
  }
  // Adds the merge of two byte-level tokens; returns the id of the merged token.
  int32_t merge(const std::string& left, const std::string& right) {
    if (!vocab.contains(left + right)) vocab[left + right] = static_cast<int32_t>(vocab.size());
    merges.push_back(left + " " + right);
    return vocab[left + right];
  }
  int32_t add_token(const std::string& content, Json flags) {
    flags["content"] = content;
    flags["id"] = static_cast<int32_t>(vocab.size() + json["added_tokens"].size());
    for (const char* key : {"single_word", "lstrip", "rstrip", "normalized", "special"}) {
      if (!flags.contains(key)) flags[key] = false;
    }
    json["added_tokens"].push_back(flags);
    return flags["id"];
  }
  std::string dump() const {
    Json full = json;
    full["model"] = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
                     {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
                     {"fuse_unk", false}, {"byte_fallback", false}, {"vocab", vocab}, {"merges", merges}};
    return full.dump();
  }
  Tokenizer build() const { return Tokenizer::from_json(dump()); }
};

Ids bytes_of(std::string_view text) {
  Ids ids;
  for (const char c : text) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

Ids cat(std::initializer_list<Ids> parts) {
  Ids all;
  for (const Ids& part : parts) all.insert(all.end(), part.begin(), part.end());
  return all;
}

TEST(TokenizerBpe, MergesByRankNotByPosition) {
  Synthetic s;
  const int32_t bc = s.merge("b", "c");
  s.merge("a", "b");  // lower priority: must not fire first although it is leftmost
  EXPECT_EQ(s.build().encode("abc"), (Ids{'a', bc}));
  Synthetic t;
  const int32_t ab = t.merge("a", "b");
  t.merge("b", "c");
  const int32_t abc = t.merge("ab", "c");
  EXPECT_EQ(t.build().encode("abc"), (Ids{abc}));
  EXPECT_EQ(t.build().encode("abab"), (Ids{ab, ab}));
}

TEST(TokenizerPreTokenizer, DigitsIndividualOrContiguous) {
  Synthetic s;
  const int32_t d12 = s.merge("1", "2");
  const int32_t d123 = s.merge("12", "3");
  for (const bool individual : {false, true}) {
    const Json digits = {{"type", "Digits"}, {"individual_digits", individual}};
    s.json["pre_tokenizer"] = {{"type", "Sequence"},
                               {"pretokenizers", Json::array({digits, byte_level_pre_tokenizer()})}};
    const Ids expected = individual ? Ids{'x', '1', '2', '3'} : Ids{'x', d123};
    EXPECT_EQ(s.build().encode("x123"), expected);
  }
  (void)d12;
}

TEST(TokenizerPreTokenizer, ByteLevelPrefixSpaceAndContractions) {
  Synthetic s;
  const int32_t apostrophe_s = s.merge("'", "s");
  s.json["pre_tokenizer"] = byte_level_pre_tokenizer(/*add_prefix_space=*/true);
  const Tokenizer tokenizer = s.build();
  const int32_t space = static_cast<int32_t>(static_cast<unsigned char>(' '));
  EXPECT_EQ(tokenizer.encode("hi"), (Ids{space, 'h', 'i'}));
  EXPECT_EQ(tokenizer.encode(" hi"), (Ids{space, 'h', 'i'}));
  EXPECT_EQ(tokenizer.encode("it's"), (Ids{space, 'i', 't', apostrophe_s}));
  EXPECT_EQ(tokenizer.decode(tokenizer.encode("it's")), " it's");
}

TEST(TokenizerAddedTokens, LeftmostLongestMatch) {
  Synthetic s;
  const int32_t ab = s.add_token("ab", {});
  const int32_t abc = s.add_token("abc", {});
  const int32_t bcd = s.add_token("bcd", {});
  const Tokenizer tokenizer = s.build();
  EXPECT_EQ(tokenizer.encode("xabcd"), (Ids{'x', abc, 'd'}));
  EXPECT_EQ(tokenizer.encode("xabd"), (Ids{'x', ab, 'd'}));
  EXPECT_EQ(tokenizer.encode("xbcd"), (Ids{'x', bcd}));
}

TEST(TokenizerAddedTokens, LstripAndRstripAbsorbWhitespace) {
  const int32_t space = ' ';
  const std::string text = "a <mask>  b";
  const Ids spaces_b = bytes_of("  b");  // no merges: every byte is its own token
  struct Case {
    Json flags;
    std::function<Ids(int32_t)> expected;
  };
  const Case cases[] = {
      {Json::object(), [&](int32_t m) { return cat({{'a', space, m}, spaces_b}); }},
      {Json{{"lstrip", true}}, [&](int32_t m) { return cat({{'a', m}, spaces_b}); }},
      {Json{{"rstrip", true}}, [&](int32_t m) { return Ids{'a', space, m, 'b'}; }},
      {Json{{"lstrip", true}, {"rstrip", true}}, [&](int32_t m) { return Ids{'a', m, 'b'}; }},
  };
  for (const Case& c : cases) {
    Synthetic s;
    const int32_t mask = s.add_token("<mask>", c.flags);
    EXPECT_EQ(s.build().encode(text), c.expected(mask)) << c.flags.dump();
  }
}

// Expected ids recorded from HF tokenizers 0.23.2 (Node binding) on the fixture tokenizer plus these tokens.
// They pin HF's quirks: new added tokens are numbered from the vocabulary size whatever their "id" says, and a
// token found inside whitespace that an rstrip token already absorbed is still emitted.
TEST(TokenizerAddedTokens, StripQuirksMatchHf) {
  Json json = read_json(kTinyDir / "tokenizer.json");
  int32_t file_id = 3000;
  for (const auto& [content, lstrip, rstrip] : std::vector<std::tuple<std::string, bool, bool>>{
           {"<r>", false, true}, {"  ", false, false}, {" x", false, false}, {"<l>", true, false},
           {"<lr>", true, true}}) {
    json["added_tokens"].push_back({{"id", file_id++}, {"content", content}, {"single_word", false},
                                    {"lstrip", lstrip}, {"rstrip", rstrip}, {"normalized", false},
                                    {"special", true}});
  }
  const Tokenizer t = Tokenizer::from_json(json.dump());
  EXPECT_EQ(t.token_to_id("<r>"), 1024);
  EXPECT_EQ(t.token_to_id("<lr>"), 1028);
  const auto id = [&](const char* token) { return t.token_to_id(token).value_or(-1); };
  EXPECT_EQ(t.encode("<r>    y", false), (Ids{1024, 1025, 1025, id("y")}));
  EXPECT_EQ(t.encode("<r>   y", false), (Ids{1024, 1025, id("\u0120y")}));
  EXPECT_EQ(t.encode("a  <l>b", false), (Ids{id("a"), 1025, 1027, id("b")}));
  EXPECT_EQ(t.encode("a <lr>  b", false), (Ids{id("a"), 1028, 1025, id("b")}));
}

TEST(TokenizerAddedTokens, SingleWordOnlyMatchesWholeWords) {
  Synthetic s;
  const int32_t cat_id = s.add_token("cat", {{"single_word", true}});
  EXPECT_EQ(s.build().encode("concat cat"), cat({bytes_of("concat "), {cat_id}}));
  EXPECT_EQ(s.build().encode("cat_"), bytes_of("cat_"));
}

TEST(TokenizerAddedTokens, NormalizedTokensMatchAfterNormalization) {
  const std::string decomposed = "\u1100\u1161";  // NFC: U+AC00
  for (const bool normalized : {true, false}) {
    Synthetic s;
    s.json["normalizer"] = {{"type", "NFC"}};
    const int32_t ga = s.add_token("\uAC00", {{"normalized", normalized}});
    const Tokenizer tokenizer = s.build();
    EXPECT_EQ(tokenizer.encode("\uAC00"), (Ids{ga}));  // raw text already in NFC matches either way
    const Ids expected = normalized ? Ids{'x', ga} : bytes_of("x\uAC00");
    EXPECT_EQ(tokenizer.encode("x" + decomposed), expected) << "normalized=" << normalized;
    EXPECT_EQ(tokenizer.decode(Ids{ga}), "\uAC00");
  }
}

TEST(TokenizerAddedTokens, SpecialTokensAreSkippedWhenAsked) {
  Synthetic s;
  const int32_t eot = s.add_token("<eot>", {{"special", true}});
  const int32_t tag = s.add_token("<tag>", {});
  const Tokenizer tokenizer = s.build();
  const Ids ids = tokenizer.encode("hi<eot><tag>");
  EXPECT_EQ(ids, (Ids{'h', 'i', eot, tag}));
  EXPECT_EQ(tokenizer.decode(ids, true), "hi<tag>");
  EXPECT_EQ(tokenizer.decode(ids, false), "hi<eot><tag>");
  EXPECT_EQ(tokenizer.vocab_size(), tag + 1);
}

TEST(TokenizerProperties, DecodeInvertsEncodeOnRandomText) {
  // NFC-stable characters only, so that decode(encode(text)) must give the text back byte for byte; no ">",
  // which could complete "<BOS_TOKEN" into a special token that skip_special_tokens drops.
  const std::vector<std::string> alphabet = {"a", "Z", " ", "  ", "\t", "\n", "\r\n", "7", "42", "'s", "'ll",
                                             "-", "_", ".", "\u00e9", "\u00df", "\u4e2d", "\u0416", "\u0661",
                                             "\U0001F680", "\u00a0", "\u3000", "<", "|", "<BOS_TOKEN"};
  std::mt19937 rng(1234);
  for (int round = 0; round < 300; ++round) {
    std::string text;
    const int length = static_cast<int>(rng() % 40);
    for (int i = 0; i < length; ++i) text += alphabet[rng() % alphabet.size()];
    EXPECT_EQ(tiny().decode(tiny().encode(text, false)), text);
    const Ids ids = tiny().encode(text);
    EXPECT_EQ(stream(ids, true), text);
  }
}

TEST(TokenizerProperties, StreamingMatchesDecodeOnRandomIds) {
  std::mt19937 rng(99);
  for (int round = 0; round < 200; ++round) {
    Ids ids(rng() % 12);
    for (int32_t& id : ids) id = static_cast<int32_t>(rng() % static_cast<uint32_t>(tiny().vocab_size()));
    for (const bool skip : {false, true}) EXPECT_EQ(stream(ids, skip), tiny().decode(ids, skip));
  }
}

// ---------------------------------------------------------------------------------------------------------
// Errors

TEST(TokenizerErrors, RejectsInvalidUtf8Input) {
  EXPECT_ERROR_MENTIONS(tiny().encode("abc\xFF"), "not valid UTF-8");
  EXPECT_ERROR_MENTIONS(tiny().encode("\xED\xA0\x80"), "not valid UTF-8");  // surrogate
  EXPECT_ERROR_MENTIONS(tiny().encode("\xC0\xAF"), "not valid UTF-8");      // overlong
  EXPECT_ERROR_MENTIONS(tiny().encode("\xE2\x82"), "not valid UTF-8");      // truncated
}

TEST(TokenizerErrors, NamesUnsupportedComponents) {
  const auto with = [](const char* field, Json value) {
    Synthetic s;
    s.json[field] = std::move(value);
    return s.dump();
  };
  EXPECT_ERROR_MENTIONS(Tokenizer::from_json(with("normalizer", {{"type", "Lowercase"}})), "'Lowercase'");
  const Json strip = {{"type", "Strip"}};
  EXPECT_ERROR_MENTIONS(Tokenizer::from_json(with("normalizer", {{"type", "Sequence"},
                                                                 {"normalizers", Json::array({strip})}})),
                        "normalizer.normalizers[0].type: unsupported normalizer type 'Strip'");
  EXPECT_ERROR_MENTIONS(Tokenizer::from_json(with("pre_tokenizer", {{"type", "Metaspace"}})),
                        "unsupported pre_tokenizer type 'Metaspace'");
  EXPECT_ERROR_MENTIONS(Tokenizer::from_json(with("post_processor", {{"type", "BertProcessing"}})),
                        "unsupported post_processor type 'BertProcessing'");
  EXPECT_ERROR_MENTIONS(Tokenizer::from_json(with("decoder", {{"type", "WordPiece"}})),
                        "unsupported decoder type 'WordPiece'");

  Json model = Json::parse(Synthetic().dump());
  model["model"]["type"] = "Unigram";
  EXPECT_ERROR_MENTIONS(Tokenizer::from_json(model.dump()), "unsupported model type 'Unigram'");
  for (const auto& [key, value] : std::vector<std::pair<std::string, Json>>{
           {"byte_fallback", true}, {"dropout", 0.1}, {"continuing_subword_prefix", "##"},
           {"end_of_word_suffix", "</w>"}}) {
    Json bpe = Json::parse(Synthetic().dump());
    bpe["model"][key] = value;
    EXPECT_ERROR_MENTIONS(Tokenizer::from_json(bpe.dump()), "model." + key);
  }
}

TEST(TokenizerErrors, NamesMalformedFields) {
  EXPECT_ERROR_MENTIONS(Tokenizer::from_json("{\"model\": "), "tokenizer.json: malformed JSON");
  EXPECT_ERROR_MENTIONS(Tokenizer::from_json("[1, 2]"), "tokenizer.json must be an object");
  EXPECT_ERROR_MENTIONS(Tokenizer::from_json("{}"), "model is missing");

  const auto broken = [](auto edit) {
    Json json = Json::parse(Synthetic().dump());
    edit(json);
    return json.dump();
  };
  EXPECT_ERROR_MENTIONS(Tokenizer::from_json(broken([](Json& j) { j["model"]["vocab"] = Json::array(); })),
                        "model.vocab must be an object");
  EXPECT_ERROR_MENTIONS(Tokenizer::from_json(broken([](Json& j) { j["model"]["vocab"]["x"] = -3; })),
                        "model.vocab.x = -3 is out of range");
  EXPECT_ERROR_MENTIONS(Tokenizer::from_json(broken([](Json& j) { j["model"]["vocab"]["x"] = "7"; })),
                        "model.vocab.x must be an integer");
  EXPECT_ERROR_MENTIONS(
      Tokenizer::from_json(broken([](Json& j) { j["model"]["vocab"]["huge"] = 18446744073709551615ull; })),
      "out of range");
  const auto with_merges = [&](Json merges) {
    return broken([&](Json& j) { j["model"]["merges"] = std::move(merges); });
  };
  EXPECT_ERROR_MENTIONS(Tokenizer::from_json(with_merges(Json::array({"a q9"}))),
                        "model.merges[0]: token 'q9' is not in model.vocab");
  EXPECT_ERROR_MENTIONS(Tokenizer::from_json(with_merges(Json::array({"abc"}))), "model.merges[0]");
  EXPECT_ERROR_MENTIONS(Tokenizer::from_json(with_merges(Json::array({Json::array({1, 2})}))),
                        "model.merges[0][0] must be a string");
  EXPECT_ERROR_MENTIONS(
      Tokenizer::from_json(broken([](Json& j) { j["added_tokens"] = Json::array({Json{{"id", 300}}}); })),
      "added_tokens[0].content is missing");
  EXPECT_ERROR_MENTIONS(Tokenizer::from_json(broken([](Json& j) {
                          j["post_processor"] = Json::parse(R"({"type": "TemplateProcessing",
                              "single": [{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}],
                              "special_tokens": {}})");
                        })),
                        "special token '<s>' is not defined");
  EXPECT_ERROR_MENTIONS(Tokenizer::from_json(Synthetic().dump(), "{\"bos_token\": \"<nope>\"}"),
                        "tokenizer_config.json: bos_token = '<nope>' is not a token");
  EXPECT_ERROR_MENTIONS(Tokenizer::from_json(Synthetic().dump(), "{\"eos_token\": 3}"),
                        "tokenizer_config.json: eos_token must be a string");
  EXPECT_ERROR_MENTIONS(Tokenizer::from_json(Synthetic().dump(), "not json"),
                        "tokenizer_config.json: malformed JSON");
  EXPECT_ERROR_MENTIONS(Tokenizer::from_dir(kFixtures / "no-such-model"), "no-such-model");
}

// Every field of a small but complete tokenizer.json replaced by values of every JSON type: loading either
// succeeds or throws tide::Error, never another exception (or a crash, under the sanitizers).
TEST(TokenizerErrors, WrongFieldTypesOnlyEverThrowTideError) {
  Synthetic s;
  s.merge("a", "b");
  s.add_token("<s>", {{"special", true}});
  s.json["normalizer"] = Json::parse(R"({"type": "Sequence", "normalizers": [{"type": "NFC"}]})");
  s.json["pre_tokenizer"] = Json::parse(R"({"type": "Sequence", "pretokenizers": [
      {"type": "Digits", "individual_digits": true}, {"type": "ByteLevel", "add_prefix_space": false}]})");
  s.json["post_processor"] = Json::parse(R"({"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
      "special_tokens": {"<s>": {"id": "<s>", "ids": [257], "tokens": ["<s>"]}}})");
  const Json original = Json::parse(s.dump());
  ASSERT_EQ(Tokenizer::from_json(original.dump()).encode("ab1"), (Ids{257, 256, '1'}));

  const Json flat = original.flatten();
  const std::vector<Json> replacements = {nullptr, -1, 7, 1e30, "x", Json::array(), Json::object(), true};
  int loads = 0;
  for (const auto& [pointer, value] : flat.items()) {
    if (pointer.starts_with("/model/vocab/") && pointer != "/model/vocab/a") continue;
    for (const Json& replacement : replacements) {
      Json broken = original;
      broken[Json::json_pointer(pointer)] = replacement;
      try {
        Tokenizer::from_json(broken.dump()).encode("ab 12<s>");
        ++loads;
      } catch (const Error&) {
        ++loads;
      } catch (const std::exception& e) {
        ADD_FAILURE() << pointer << " = " << replacement.dump() << " escaped as: " << e.what();
      }
    }
  }
  EXPECT_GT(loads, 100);
}

TEST(TokenizerErrors, CharacterMissingFromVocabularyIsNamed) {
  Json json = Json::parse(Synthetic().dump());
  json["model"]["vocab"].erase(bl("z"));
  const Tokenizer tokenizer = Tokenizer::from_json(json.dump());
  EXPECT_ERROR_MENTIONS(tokenizer.encode("lazy"), "'lazy'");
}

}  // namespace
}  // namespace tide

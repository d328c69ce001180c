// The stand-in tokenizer of a model folder without tokenizer files (Tokenizer::stand_in): every id of the
// vocabulary decodes to text and encodes back to itself where its text is valid UTF-8 (bytes of one
// character, every "<tok_N>"), token strings round-trip, and it is used only when a folder has no tokenizer
// file at all: a broken or partial tokenizer is still an error.
#include <gtest/gtest.h>

#include <fstream>

#include "../test_util.h"
#include "core/error.h"
#include "tokenizer/streaming_decoder.h"
#include "tokenizer/tokenizer.h"

namespace tide {
namespace {

using Ids = std::vector<int32_t>;

TEST(StandInTokenizer, EveryIdDecodesAndEncodesBack) {
  const Tokenizer t = Tokenizer::stand_in(1024);
  EXPECT_TRUE(t.is_stand_in());
  EXPECT_EQ(t.vocab_size(), 1024);
  for (int32_t id = 0; id < 1024; ++id) {
    const std::string text = t.decode(Ids{id});
    ASSERT_FALSE(text.empty()) << id;
    if (id < 128 || id >= 256) EXPECT_EQ(t.encode(text), Ids{id}) << id;  // ASCII bytes and placeholders
    EXPECT_EQ(t.token_to_id(t.id_to_token(id)), id);
  }
  EXPECT_EQ(t.decode(Ids{300}), "<tok_300>");
  EXPECT_EQ(t.decode(Ids{65}), "A");
  EXPECT_EQ(t.id_to_token(65), "<0x41>");
  EXPECT_FALSE(t.is_special(300));
  EXPECT_FALSE(t.bos_id().has_value());
  EXPECT_FALSE(t.eos_id().has_value());
  // A mixed sequence: ASCII, a two-byte character as its bytes, placeholders next to each other.
  const Ids ids = {104, 105, 0xC3, 0xA9, 32, 300, 1023, 256, 33};
  EXPECT_EQ(t.decode(ids), "hi\xC3\xA9 <tok_300><tok_1023><tok_256>!");
  EXPECT_EQ(t.encode(t.decode(ids)), ids);
  EXPECT_EQ(t.encode(t.decode(ids), /*add_special_tokens=*/false), ids);  // no BOS either way
  // The streaming decoder gives the same text token by token.
  StreamingDecoder stream(t);
  std::string streamed;
  for (int32_t id : ids) streamed += stream.push(id);
  streamed += stream.finish();
  EXPECT_EQ(streamed, t.decode(ids));
}

TEST(StandInTokenizer, OnlyCanonicalPlaceholdersOfTheVocabularyAreIds) {
  const Tokenizer t = Tokenizer::stand_in(1024);
  auto bytes = [](const std::string& s) { return Ids(s.begin(), s.end()); };
  for (const std::string text : {"<tok_255>", "<tok_1024>", "<tok_0300>", "<tok_>", "<tok_300", "<tok_-300>"}) {
    EXPECT_EQ(t.encode(text), bytes(text)) << text;  // not an id: its bytes
  }
  EXPECT_FALSE(t.token_to_id("<tok_1024>").has_value());
  EXPECT_FALSE(t.token_to_id("<0x4G>").has_value());
  EXPECT_THROW(t.decode(Ids{1024}), Error);
  EXPECT_THROW(t.id_to_token(-1), Error);
}

TEST(StandInTokenizer, SmallVocabularyRefusesBytesWithoutAnId) {
  const Tokenizer t = Tokenizer::stand_in(100);
  EXPECT_EQ(t.encode("a!"), (Ids{97, 33}));
  EXPECT_EQ(t.decode(Ids{99}), "c");
  try {
    t.encode("\xC3\xA9");
    FAIL() << "a byte outside a vocabulary of 100 ids encoded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("0xC3"), std::string::npos) << e.what();
  }
}

TEST(StandInTokenizer, ConfigOnlyFolderGetsTheStandInOfItsVocabulary) {
  test::TempDir dir;
  std::filesystem::copy_file(test::fixture("cohere2-tiny/config.json"), dir.path() / "config.json");
  const Tokenizer t = Tokenizer::from_dir(dir.path());
  EXPECT_TRUE(t.is_stand_in());
  EXPECT_EQ(t.vocab_size(), 1024);  // the fixture's vocab_size
  EXPECT_FALSE(Tokenizer::from_dir(test::fixture("cohere2-tiny")).is_stand_in());
}

TEST(StandInTokenizer, ABrokenOrPartialTokenizerIsStillAnError) {
  test::TempDir dir;
  std::filesystem::copy_file(test::fixture("cohere2-tiny/config.json"), dir.path() / "config.json");
  std::ofstream(dir.path() / "tokenizer.json") << "{\"model\": ";  // truncated JSON
  try {
    Tokenizer::from_dir(dir.path());
    FAIL() << "a corrupt tokenizer.json loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos) << e.what();
  }
  // tokenizer_config.json without tokenizer.json: the folder has a tokenizer tide cannot read.
  std::filesystem::remove(dir.path() / "tokenizer.json");
  std::filesystem::copy_file(test::fixture("cohere2-tiny/tokenizer_config.json"), dir.path() / "tokenizer_config.json");
  try {
    Tokenizer::from_dir(dir.path());
    FAIL() << "a folder with tokenizer_config.json but no tokenizer.json got the stand-in";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos) << e.what();
  }
  // No tokenizer file and a config.json without vocab_size: named.
  std::filesystem::remove(dir.path() / "tokenizer_config.json");
  std::ofstream(dir.path() / "config.json") << "{\"model_type\": \"cohere2\"}";
  try {
    Tokenizer::from_dir(dir.path());
    FAIL() << "a config.json without vocab_size gave a stand-in";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("vocab_size"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tide

// Tests of tide::Tokenizer against Hugging Face `tokenizers` references (tests/fixtures): encoding and both
// decodings of every reference case, chat-case ids, special ids, threads and long inputs, lossy decoding and
// the streaming decoder.
#include "tokenizer_test_util.h"

namespace tide {
namespace {

using namespace test;

// ---------------------------------------------------------------------------------------------------------
// Reference cases (HF tokenizers 0.23 output)

TEST(TokenizerFixture, EncodesAndDecodesEveryReferenceCase) {
  ASSERT_GE(tokenizer_cases().size(), 20u);
  for (const Json& c : tokenizer_cases()) {
    const std::string text = c.at("text");
    SCOPED_TRACE("text: " + text);
    EXPECT_EQ(tiny().encode(text), c.at("ids").get<Ids>());
    EXPECT_EQ(tiny().encode(text, /*add_special_tokens=*/false), c.at("ids_no_special").get<Ids>());
    const Ids ids = c.at("ids");
    EXPECT_EQ(tiny().decode(ids, /*skip_special_tokens=*/true), c.at("decoded").get<std::string>());
    EXPECT_EQ(tiny().decode(ids, /*skip_special_tokens=*/false), c.at("decoded_with_special").get<std::string>());
  }
}

TEST(TokenizerFixture, EncodesEveryRenderedChatCase) {
  const Json cases = read_json(kTinyDir / "chat_cases.json").at("cases");
  int checked = 0;
  for (const Json& c : cases) {
    if (!c.contains("ids")) continue;  // the expect_error case has nothing to tokenize
    const std::string text = c.at("text");
    SCOPED_TRACE("text: " + text);
    EXPECT_EQ(tiny().encode(text, /*add_special_tokens=*/false), c.at("ids").get<Ids>());
    ++checked;
  }
  EXPECT_GE(checked, 4);
}

TEST(TokenizerFixture, ReadsSpecialIdsFromTheFiles) {
  EXPECT_EQ(tiny().vocab_size(), 1024);
  EXPECT_EQ(tiny().bos_id(), tiny().token_to_id("<BOS_TOKEN>"));
  EXPECT_EQ(tiny().eos_id(), tiny().token_to_id("<|END_OF_TURN_TOKEN|>"));
  EXPECT_EQ(tiny().bos_id(), 5);
  EXPECT_EQ(tiny().eos_id(), 9);
  EXPECT_TRUE(tiny().add_bos_token());
  EXPECT_TRUE(tiny().is_special(5));
  EXPECT_FALSE(tiny().is_special(100));
  EXPECT_FALSE(tiny().is_special(-1));
  EXPECT_EQ(tiny().id_to_token(5), "<BOS_TOKEN>");
  EXPECT_EQ(tiny().token_to_id("no such token"), std::nullopt);

  // Without tokenizer_config.json: BOS comes from the post-processor, and there is no chat EOS.
  const Tokenizer bare = Tokenizer::from_json(read_text(kTinyDir / "tokenizer.json"));
  EXPECT_EQ(bare.bos_id(), 5);
  EXPECT_EQ(bare.eos_id(), std::nullopt);
}

TEST(TokenizerFixture, AddedTokensSplitTheTextIndependently) {
  const std::string a = "Hello, world! 12 ";
  const std::string b = " and  more\ttext";
  Ids expected = tiny().encode(a, false);
  expected.push_back(9);
  const Ids tail = tiny().encode(b, false);
  expected.insert(expected.end(), tail.begin(), tail.end());
  EXPECT_EQ(tiny().encode(a + "<|END_OF_TURN_TOKEN|>" + b, false), expected);
}

TEST(TokenizerFixture, MergesInBothJsonSpellingsGiveTheSameIds) {
  Json json = read_json(kTinyDir / "tokenizer.json");
  Json& merges = json.at("model").at("merges");
  ASSERT_FALSE(merges.empty());
  const bool pairs = merges.front().is_array();
  Json respelled = Json::array();
  for (const Json& merge : merges) {
    if (pairs) {
      respelled.push_back(merge[0].get<std::string>() + " " + merge[1].get<std::string>());
    } else {
      const std::string line = merge;
      const size_t space = line.find(' ');
      respelled.push_back(Json::array({line.substr(0, space), line.substr(space + 1)}));
    }
  }
  merges = respelled;
  const Tokenizer other = Tokenizer::from_json(json.dump());
  for (const Json& c : tokenizer_cases()) {
    const std::string text = c.at("text");
    EXPECT_EQ(other.encode(text, false), c.at("ids_no_special").get<Ids>()) << text;
  }
}

TEST(TokenizerFixture, IsUsableFromSeveralThreads) {
  std::vector<Ids> results(4);
  std::vector<std::thread> threads;
  const std::string text = tokenizer_cases().at(0).at("text");
  for (size_t t = 0; t < results.size(); ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) results[t] = tiny().encode(text + std::to_string(i % 7));
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const Ids& ids : results) EXPECT_EQ(ids, tiny().encode(text + "3"));
}

TEST(TokenizerFixture, LongInputsTokenizeInLinearTime) {
  std::string text;
  for (int i = 0; text.size() < (1u << 20); ++i) {
    text += tokenizer_cases().at(static_cast<size_t>(i) % tokenizer_cases().size()).at("text").get<std::string>();
    text.append(" ").append(std::to_string(i * 7919)).append("\n");  // not " " + ...: GCC 12 -Wrestrict false alarm
  }
  const std::string one_word(200000, 'x');
  const std::string spaces = std::string(200000, ' ') + "x";
  const auto start = std::chrono::steady_clock::now();
  EXPECT_GT(tiny().encode(text).size(), text.size() / 8);
  EXPECT_FALSE(tiny().encode(one_word).empty());
  EXPECT_FALSE(tiny().encode(spaces).empty());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // About 1.5 MB of text; a quadratic step would take minutes.
  EXPECT_LT(seconds, 20.0);
}

// ---------------------------------------------------------------------------------------------------------
// Decoding and streaming

// Id of the fixture token for one raw byte.
int32_t byte_id(unsigned char byte) {
  std::string token;
  byte_level::encode_bytes(std::string(1, static_cast<char>(byte)), token);
  const auto id = tiny().token_to_id(token);
  EXPECT_TRUE(id.has_value()) << "no token for byte " << int{byte};
  return id.value_or(0);
}

Ids byte_ids(std::string_view bytes) {
  Ids ids;
  for (const char c : bytes) ids.push_back(byte_id(static_cast<unsigned char>(c)));
  return ids;
}

TEST(TokenizerDecode, ReplacesInvalidUtf8LikeRustFromUtf8Lossy) {
  EXPECT_EQ(tiny().decode(byte_ids("\xF0\x9F\x98")), "\uFFFD");        // truncated: one replacement
  EXPECT_EQ(tiny().decode(byte_ids("\xE0\x80")), "\uFFFD\uFFFD");       // E0 needs A0..BF next
  EXPECT_EQ(tiny().decode(byte_ids("\xF0\x9F\x98\x41")), "\uFFFDA");   // maximal subpart, then 'A'
  EXPECT_EQ(tiny().decode(byte_ids("\xED\xA0\x80")), "\uFFFD\uFFFD\uFFFD");  // surrogate
  EXPECT_EQ(tiny().decode(byte_ids("\xC3\xA9\xFF")), "\u00E9\uFFFD");
}

TEST(TokenizerDecode, RejectsUnknownIds) {
  EXPECT_ERROR_MENTIONS(tiny().decode(Ids{5, 1024}), "1024");
  EXPECT_ERROR_MENTIONS(tiny().decode(Ids{-1}), "out of range");
}


TEST(StreamingDecoder, ConcatenationEqualsDecodeForEveryCase) {
  for (const Json& c : tokenizer_cases()) {
    const Ids ids = c.at("ids");
    for (const bool skip : {false, true}) {
      EXPECT_EQ(stream(ids, skip), tiny().decode(ids, skip)) << c.at("text");
    }
  }
}

TEST(StreamingDecoder, HoldsBackACharacterSplitAcrossTokens) {
  const Ids ids = tiny().encode("\U0001F600!", false);
  ASSERT_EQ(ids.size(), 5u) << "the fixture vocabulary has no merge for the emoji's bytes";
  StreamingDecoder decoder(tiny());
  for (size_t i = 0; i + 2 < ids.size(); ++i) EXPECT_EQ(decoder.push(ids[i]), "");
  EXPECT_EQ(decoder.push(ids[3]), "\U0001F600");
  EXPECT_EQ(decoder.push(ids[4]), "!");
  EXPECT_EQ(decoder.finish(), "");
}

TEST(StreamingDecoder, InvalidAndUnfinishedBytesMatchDecode) {
  for (const std::string_view bytes : {std::string_view("\xF0\x9F\x41"), std::string_view("a\xE2\x82"),
                                       std::string_view("\xC3\xC3\xA9")}) {
    const Ids ids = byte_ids(bytes);
    EXPECT_EQ(stream(ids, false), tiny().decode(ids));
  }
  StreamingDecoder decoder(tiny());
  EXPECT_EQ(decoder.push(byte_id(0xE2)), "");
  EXPECT_EQ(decoder.finish(), "\uFFFD");
  EXPECT_EQ(decoder.push(byte_id('a')), "a");  // finish() reset the decoder
  EXPECT_ERROR_MENTIONS(decoder.push(99999), "99999");
}

}  // namespace
}  // namespace tide

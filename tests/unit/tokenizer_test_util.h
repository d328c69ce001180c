// Helpers shared by the tokenizer tests: the fixture tokenizer and cases, error-message matching, and
// streaming decoding of an id list.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/streaming_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"


namespace tide::test {

using Json = nlohmann::json;
using Ids = std::vector<int32_t>;

inline const std::filesystem::path kFixtures = TIDE_FIXTURES_DIR;
inline const std::filesystem::path kTinyDir = kFixtures / "cohere2-tiny";

inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << "cannot open " << path;
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

inline Json read_json(const std::filesystem::path& path) { return Json::parse(read_text(path)); }

inline const Tokenizer& tiny() {
  static const Tokenizer tokenizer = Tokenizer::from_dir(kTinyDir);
  return tokenizer;
}

inline const Json& tokenizer_cases() {
  static const Json cases = read_json(kFixtures / "tokenizer_cases.json").at("cases");
  return cases;
}

// The error message of `fn`, or "" when it does not throw tide::Error.
template <typename Fn>
inline std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_ERROR_MENTIONS(statement, needle)                                                   \
  do {                                                                                            \
    const std::string message_ = error_of([&] { statement; });                                    \
    EXPECT_NE(message_.find(needle), std::string::npos) << "message: '" << message_ << "'";       \
  } while (0)

// Decodes `ids` one at a time through a StreamingDecoder.
inline std::string stream(const Ids& ids, bool skip_special_tokens) {
  StreamingDecoder decoder(tiny(), skip_special_tokens);
  std::string text;
  for (const int32_t id : ids) {
    const std::string piece = decoder.push(id);
    EXPECT_EQ(utf8::find_invalid(piece), utf8::kValid) << "push returned invalid UTF-8";
    text += piece;
  }
  return text + decoder.finish();
}

}  // namespace tide::test

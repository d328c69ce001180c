// JSON with integers of any size, as Python's json module reads them: request bodies reach the chat template,
// which prints tools, documents and tool arguments with tojson, and transformers (Python) prints an integer
// such as 2**70 with all its digits. nlohmann::json parses an integer literal beyond int64 / uint64 as a
// double, losing digits; parse_json_exact keeps it instead as a "big integer": a nlohmann binary value whose
// bytes are the literal's decimal text (ASCII, "-" then digits, no leading zeros) and whose subtype is
// kBigIntegerSubtype. JSON text never produces binary values, so the tag cannot collide with a client's data.
// The chat templates' from_json (jinja_value.h) reads big integers as exact integers; dump_json_exact prints
// them back as bare digits (nlohmann's dump() would print {"bytes": [...], "subtype": 177}).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

namespace tide {

// The binary subtype that marks a big integer.
inline constexpr std::uint8_t kBigIntegerSubtype = 0xB1;

// Parses one JSON value (whitespace around it only) into an ordered_json: objects keep the text's key order (a
// repeated key keeps its first position and takes its last value, as Python's json.loads does), numbers are
// what nlohmann::json makes of them, except an integer literal that fits neither int64 nor uint64, which
// becomes a big integer. Containers nest at most `max_depth` deep ("[]" is depth 1, "[[]]" depth 2; a scalar
// 0). Throws nlohmann::json::parse_error on invalid text (out_of_range for a float literal beyond double, as
// nlohmann::json::parse does), tide::Error "JSON nests deeper than N levels" when nested too deep.
nlohmann::ordered_json parse_json_exact(std::string_view text, int max_depth);

// Whether `value` is a big integer (a binary value of subtype kBigIntegerSubtype).
template <typename Json>
bool is_big_integer(const Json& value) {
  return value.is_binary() && value.get_binary().has_subtype() && value.get_binary().subtype() == kBigIntegerSubtype;
}

// The decimal text of a big integer (`value` must be one).
template <typename Json>
std::string big_integer_text(const Json& value) {
  const auto& bytes = value.get_binary();
  return std::string(bytes.begin(), bytes.end());
}

// A big integer holding `decimal` ("-" then digits, no leading zeros). Throws tide::Error on other text.
nlohmann::ordered_json make_big_integer(std::string_view decimal);

// nlohmann's dump(indent), with big integers printed as their digits, so a value read by parse_json_exact goes
// back out as the client wrote it. Invalid UTF-8 in strings becomes U+FFFD when `replace_invalid_utf8` (what
// the server's responses do), else it throws nlohmann's type_error as dump() does.
std::string dump_json_exact(const nlohmann::ordered_json& json, int indent = -1, bool replace_invalid_utf8 = true);
std::string dump_json_exact(const nlohmann::json& json, int indent = -1, bool replace_invalid_utf8 = true);

}  // namespace tide

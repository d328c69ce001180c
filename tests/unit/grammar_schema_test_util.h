// Helpers for the grammar compiler tests (JSON Schema, regex, choice), independent of the engine's matcher: a
// memoized top-down recognizer over the grammar IR (for short texts), a sampler of random derivations with a
// depth bound, a JSON Schema validator for the subset the compiler supports (written from the specification,
// not from the compiler), and the canonical JSON layout (", " and ": ").
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/grammar.h"

namespace tide::test {

using Json = nlohmann::ordered_json;
using grammar::CharRange;
using grammar::Element;
using grammar::Grammar;

// Decodes one UTF-8 code point at text[pos]; returns its length (0: malformed or a surrogate).
inline size_t utf8_at(std::string_view text, size_t pos, uint32_t* cp) {
  const auto b0 = static_cast<uint8_t>(text[pos]);
  const size_t n = b0 < 0x80 ? 1 : (b0 >> 5) == 6 ? 2 : (b0 >> 4) == 14 ? 3 : (b0 >> 3) == 30 ? 4 : 0;
  if (n == 0 || pos + n > text.size()) return 0;
  uint32_t v = n == 1 ? b0 : b0 & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) {
    const auto b = static_cast<uint8_t>(text[pos + k]);
    if ((b & 0xC0) != 0x80) return 0;
    v = (v << 6) | (b & 0x3F);
  }
  static const uint32_t min_of[] = {0, 0, 0x80, 0x800, 0x10000};
  if (v < min_of[n] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  *cp = v;
  return n;
}

inline std::string utf8(uint32_t cp) {
  std::string out;
  if (cp < 0x80) return std::string(1, static_cast<char>(cp));
  if (cp < 0x800) return out + char(0xC0 | (cp >> 6)) + char(0x80 | (cp & 0x3F));
  if (cp < 0x10000) return out + char(0xE0 | (cp >> 12)) + char(0x80 | ((cp >> 6) & 0x3F)) + char(0x80 | (cp & 0x3F));
  return out + char(0xF0 | (cp >> 18)) + char(0x80 | ((cp >> 12) & 0x3F)) + char(0x80 | ((cp >> 6) & 0x3F)) +
         char(0x80 | (cp & 0x3F));
}

inline bool class_contains(const Element& e, uint32_t cp) {
  bool in = false;
  for (const CharRange& r : e.ranges) in = in || (cp >= r.lo && cp <= r.hi);
  return e.negated ? !in : in;
}

// Whether the grammar's root matches all of `text`: the end positions of each (rule, start) memoized.
// Needs no left recursion (Grammar::validate refuses it).
class Recognizer {
 public:
  explicit Recognizer(const Grammar& g) : g_(g) {}
  bool accepts(std::string_view text) {
    text_ = text;
    memo_.clear();
    const auto& ends = rule_ends(g_.root, 0);
    return std::find(ends.begin(), ends.end(), text.size()) != ends.end();
  }

 private:
  const std::vector<size_t>& rule_ends(int32_t rule, size_t start) {
    const uint64_t key = (static_cast<uint64_t>(rule) << 32) | start;
    auto it = memo_.find(key);
    if (it != memo_.end()) return it->second;
    std::vector<size_t> out;
    for (const grammar::Sequence& seq : g_.rules[rule].alternatives) {
      std::vector<size_t> positions{start};
      for (const Element& e : seq) {
        std::vector<size_t> next;
        for (size_t p : positions) element_ends(e, p, &next);
        std::sort(next.begin(), next.end());
        next.erase(std::unique(next.begin(), next.end()), next.end());
        positions = std::move(next);
        if (positions.empty()) break;
      }
      out.insert(out.end(), positions.begin(), positions.end());
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return memo_[key] = std::move(out);
  }
  void element_ends(const Element& e, size_t p, std::vector<size_t>* out) {
    switch (e.kind) {
      case Element::Kind::kLiteral:
        if (text_.substr(p, e.bytes.size()) == e.bytes) out->push_back(p + e.bytes.size());
        return;
      case Element::Kind::kCharClass: {
        uint32_t cp = 0;
        const size_t n = p < text_.size() ? utf8_at(text_, p, &cp) : 0;
        if (n > 0 && class_contains(e, cp)) out->push_back(p + n);
        return;
      }
      case Element::Kind::kRule: {
        const std::vector<size_t> ends = rule_ends(e.rule, p);  // a copy: the memo may grow
        out->insert(out->end(), ends.begin(), ends.end());
        return;
      }
    }
  }
  const Grammar& g_;
  std::string_view text_;
  std::map<uint64_t, std::vector<size_t>> memo_;
};

inline bool accepts(const Grammar& g, std::string_view text) { return Recognizer(g).accepts(text); }

// Random texts of the grammar: uniform choices, and past max_depth the alternative with the shortest
// derivation, so every sample ends.
class Sampler {
 public:
  explicit Sampler(const Grammar& g) : g_(g), height_(g.rules.size(), kInf) {
    for (bool changed = true; changed;) {  // least derivation height per rule, to a fixpoint
      changed = false;
      for (size_t r = 0; r < g.rules.size(); ++r) {
        for (const auto& seq : g.rules[r].alternatives) {
          const int h = seq_height(seq);
          if (h < height_[r]) height_[r] = h, changed = true;
        }
      }
    }
  }
  std::string sample(std::mt19937& rng, int max_depth = 24) {
    std::string out;
    emit_rule(g_.root, rng, 0, max_depth, &out);
    return out;
  }

 private:
  static constexpr int kInf = 1 << 28;
  int seq_height(const grammar::Sequence& seq) const {
    int h = 1;
    for (const Element& e : seq) {
      if (e.kind == Element::Kind::kRule) h = std::max(h, height_[e.rule] >= kInf ? kInf : height_[e.rule] + 1);
    }
    return h;
  }
  void emit_rule(int32_t rule, std::mt19937& rng, int depth, int max_depth, std::string* out) {
    const auto& alts = g_.rules[rule].alternatives;
    size_t pick = std::uniform_int_distribution<size_t>(0, alts.size() - 1)(rng);
    if (depth > max_depth) {
      for (size_t i = 0; i < alts.size(); ++i) {
        if (seq_height(alts[i]) < seq_height(alts[pick])) pick = i;
      }
    }
    for (const Element& e : alts[pick]) {
      if (e.kind == Element::Kind::kLiteral) *out += e.bytes;
      if (e.kind == Element::Kind::kRule) emit_rule(e.rule, rng, depth + 1, max_depth, out);
      if (e.kind == Element::Kind::kCharClass) *out += utf8(random_char(e, rng));
    }
  }
  static uint32_t random_char(const Element& e, std::mt19937& rng) {
    // Mostly ASCII and a few interesting code points, else any scalar value; retried until in the class.
    static const uint32_t interesting[] = {'"', '\\', '/', 0, 0x1F, 0x7F, 0xE9, 0x2028, 0x4E2D, 0xFFFF, 0x1F600};
    for (int attempt = 0; attempt < 200; ++attempt) {
      uint32_t cp;
      const int kind = std::uniform_int_distribution<int>(0, 9)(rng);
      if (!e.negated && kind < 7) {
        const CharRange& r = e.ranges[std::uniform_int_distribution<size_t>(0, e.ranges.size() - 1)(rng)];
        cp = std::uniform_int_distribution<uint32_t>(r.lo, std::min(r.hi, r.lo + 200))(rng);
      } else if (kind < 7) {
        cp = std::uniform_int_distribution<uint32_t>(0x20, 0x7E)(rng);
      } else if (kind < 9) {
        cp = interesting[std::uniform_int_distribution<size_t>(0, std::size(interesting) - 1)(rng)];
      } else {
        cp = std::uniform_int_distribution<uint32_t>(0, 0x10FFFF)(rng);
      }
      if ((cp < 0xD800 || cp > 0xDFFF) && class_contains(e, cp)) return cp;
    }
    ADD_FAILURE() << "no character found for a class";
    return 'x';
  }
  const Grammar& g_;
  std::vector<int> height_;
};

// The layout the compiler writes: {"a": 1, "b": [1, 2]}.
inline std::string canonical(const Json& v) {
  if (v.is_object()) {
    std::string out = "{";
    for (auto it = v.begin(); it != v.end(); ++it) {
      out += (it == v.begin() ? "" : ", ") + Json(it.key()).dump() + ": " + canonical(it.value());
    }
    return out + "}";
  }
  if (v.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + canonical(v[i]);
    return out + "]";
  }
  return v.dump();
}

// A JSON Schema validator for the supported subset: check() returns "" for a valid instance, else what
// failed and where.
class SchemaValidator {
 public:
  explicit SchemaValidator(const Json& root) : root_(root) {}
  std::string check(const Json& v) { return check(v, root_, "", 0); }

 private:
  static size_t length(const std::string& s) {
    return static_cast<size_t>(std::count_if(s.begin(), s.end(), [](char c) { return (c & 0xC0) != 0x80; }));
  }
  static bool is_type(const Json& v, const std::string& t) {
    if (t == "integer") {
      return v.is_number_integer() || (v.is_number_float() && v.get<double>() == std::floor(v.get<double>()));
    }
    return (t == "null" && v.is_null()) || (t == "boolean" && v.is_boolean()) || (t == "string" && v.is_string()) ||
           (t == "number" && v.is_number()) || (t == "object" && v.is_object()) || (t == "array" && v.is_array());
  }
  static bool matches(const std::string& s, const char* re) { return std::regex_match(s, std::regex(re)); }
  static bool format_ok(const std::string& f, const std::string& s) {
    auto num = [&](size_t at, size_t n) { return std::stoi(s.substr(at, n)); };
    if (f == "date") {
      return matches(s, R"(\d{4}-\d\d-\d\d)") && num(5, 2) >= 1 && num(5, 2) <= 12 && num(8, 2) >= 1 && num(8, 2) <= 31;
    }
    if (f == "time") {
      return matches(s, R"(\d\d:\d\d:\d\d(\.\d+)?(Z|z|[+-]\d\d:\d\d))") && num(0, 2) < 24 && num(3, 2) < 60 &&
             num(6, 2) <= 60;
    }
    if (f == "date-time") {
      const size_t t = s.find_first_of("Tt");
      return t != std::string::npos && format_ok("date", s.substr(0, t)) && format_ok("time", s.substr(t + 1));
    }
    if (f == "uuid") return matches(s, R"([0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12})");
    if (f == "email") {
      const size_t at = s.find('@');
      return at != std::string::npos && at > 0 && s.find('@', at + 1) == std::string::npos &&
             s.find('.', at) != std::string::npos && s.back() != '.';
    }
    if (f == "ipv4") {
      if (!matches(s, R"(\d{1,3}(\.\d{1,3}){3})")) return false;
      for (size_t p = 0; p <= s.size();) {
        const size_t e = std::min(s.find('.', p), s.size());
        if (std::stoi(s.substr(p, e - p)) > 255 || (e - p > 1 && s[p] == '0')) return false;
        p = e + 1;
      }
      return true;
    }
    if (f == "ipv6") return matches(s, R"(([0-9a-fA-F]{1,4}:){7}[0-9a-fA-F]{1,4})");
    if (f == "hostname") return matches(s, R"([A-Za-z0-9-]{1,63}(\.[A-Za-z0-9-]{1,63})*)") && s[0] != '-';
    if (f == "uri") return matches(s, R"([A-Za-z][A-Za-z0-9+.-]*:\S+)");
    return false;
  }
  const Json& resolve(const std::string& ref) { return root_.at(Json::json_pointer(ref.substr(1))); }
  std::string check(const Json& v, const Json& s, const std::string& at, int depth) {
    if (depth > 200) return "too deep at " + at;
    if (s.is_boolean()) return s.get<bool>() ? "" : "false schema at " + at;
    std::string e;
    if (s.contains("$ref") && !(e = check(v, resolve(s["$ref"]), at, depth + 1)).empty()) return e;
    if (s.contains("type")) {
      bool ok = false;
      for (const Json& t : s["type"].is_array() ? s["type"] : Json::array({s["type"]})) ok = ok || is_type(v, t);
      if (!ok) return "type at " + at;
    }
    if (s.contains("enum") && std::find(s["enum"].begin(), s["enum"].end(), v) == s["enum"].end()) return "enum at " + at;
    if (s.contains("const") && s["const"] != v) return "const at " + at;
    if (s.contains("allOf")) {
      for (const Json& m : s["allOf"]) {
        if (!(e = check(v, m, at, depth + 1)).empty()) return e;
      }
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      int n = 0;
      for (const Json& m : s[key]) n += check(v, m, at, depth + 1).empty();
      if (n == 0 || (n > 1 && std::string(key) == "oneOf")) return std::string(key) + " at " + at;
    }
    if (v.is_object()) {
      const Json props = s.value("properties", Json::object());
      for (const auto& [k, sub] : v.items()) {
        if (props.contains(k)) {
          if (!(e = check(sub, props[k], at + "/" + k, depth + 1)).empty()) return e;
        } else if (s.contains("additionalProperties")) {
          if (!(e = check(sub, s["additionalProperties"], at + "/" + k, depth + 1)).empty()) return e;
        }
      }
      for (const Json& r : s.value("required", Json::array())) {
        if (!v.contains(r)) return "required at " + at;
      }
    }
    if (v.is_array()) {
      const bool tuple = s.contains("prefixItems") || (s.contains("items") && s["items"].is_array());
      const Json prefix = s.contains("prefixItems") ? s["prefixItems"] : tuple ? s["items"] : Json::array();
      const char* rest_key = s.contains("prefixItems") ? "items" : tuple ? "additionalItems" : "items";
      for (size_t i = 0; i < v.size(); ++i) {
        const std::string where = at + "/" + std::to_string(i);
        if (i < prefix.size()) e = check(v[i], prefix[i], where, depth + 1);
        else if (s.contains(rest_key)) e = check(v[i], s[rest_key], where, depth + 1);
        if (!e.empty()) return e;
      }
      if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return "minItems at " + at;
      if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return "maxItems at " + at;
    }
    if (v.is_string()) {
      const std::string str = v.get<std::string>();
      if (s.contains("minLength") && length(str) < s["minLength"].get<size_t>()) return "minLength at " + at;
      if (s.contains("maxLength") && length(str) > s["maxLength"].get<size_t>()) return "maxLength at " + at;
      if (s.contains("pattern") && !std::regex_search(str, std::regex(s["pattern"].get<std::string>()))) {
        return "pattern at " + at;
      }
      if (s.contains("format") && !format_ok(s["format"], str)) return "format at " + at;
    }
    if (v.is_number()) {
      const double x = v.get<double>();
      auto num = [&](const char* k) { return s.contains(k) && s[k].is_number(); };
      auto limit = [&](const char* k) { return s[k].get<double>(); };
      // Draft 4: boolean exclusiveMinimum / exclusiveMaximum make minimum / maximum exclusive.
      const bool ex_min = s.value("exclusiveMinimum", Json()) == true, ex_max = s.value("exclusiveMaximum", Json()) == true;
      if (num("minimum") && (ex_min ? x <= limit("minimum") : x < limit("minimum"))) return "minimum at " + at;
      if (num("maximum") && (ex_max ? x >= limit("maximum") : x > limit("maximum"))) return "maximum at " + at;
      if (num("exclusiveMinimum") && x <= limit("exclusiveMinimum")) return "exclusiveMinimum at " + at;
      if (num("exclusiveMaximum") && x >= limit("exclusiveMaximum")) return "exclusiveMaximum at " + at;
    }
    return "";
  }
  const Json& root_;
};

}  // namespace tide::test

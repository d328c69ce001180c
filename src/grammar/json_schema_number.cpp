// Integers and numbers. Without bounds: JSON's number syntax (integers: 0 or -?[1-9][0-9]*), the exponent at
// most two digits so that every number written fits a double (parsers refuse 1e999 or make it infinite). With bounds: an
// exact description of the decimals in the range, written without an exponent. A range is split at zero into
// a non-negative part and a negative part ("-" and a magnitude range); a magnitude range [a, b] into integer
// parts (a's, the ones strictly between as digit-range rules, b's) each with the fractions that keep the value
// in range. Fractions are compared as digit strings: 0.s > 0.f when s has a larger digit where they first
// differ, or continues f with a non-zero digit.
#include <fmt/format.h>

#include "grammar/json_schema_compiler.h"

namespace tide::grammar::detail {
namespace {

constexpr size_t kMaxBoundDigits = 40;

struct Bound {
  Decimal value;
  bool exclusive = false;
};

Decimal parse_decimal(const Json& v, const std::string& key, const std::string& ptr) {
  if (!v.is_number()) refuse(fmt::format("{} must be a number", key), ptr);
  if (v.is_number_float() && !std::isfinite(v.get<double>())) refuse(fmt::format("{} must be finite", key), ptr);
  const std::string text = v.dump();  // shortest round-trip text for doubles
  Decimal d;
  size_t i = 0;
  if (text[i] == '-') d.negative = true, ++i;
  std::string digits;
  int64_t point = -1, exponent = 0;
  for (; i < text.size() && text[i] != 'e' && text[i] != 'E'; ++i) {
    if (text[i] == '.') point = static_cast<int64_t>(digits.size());
    else digits += text[i];
  }
  if (point < 0) point = static_cast<int64_t>(digits.size());
  if (i < text.size()) exponent = std::stoll(text.substr(i + 1));
  point += exponent;
  if (point > static_cast<int64_t>(kMaxBoundDigits) || point < -static_cast<int64_t>(kMaxBoundDigits) ||
      digits.size() > kMaxBoundDigits) {
    refuse(fmt::format("{} has more digits than the {} supported", key, kMaxBoundDigits), ptr);
  }
  if (point <= 0) {
    d.whole = "0";
    d.fraction = std::string(static_cast<size_t>(-point), '0') + digits;
  } else {
    if (static_cast<size_t>(point) > digits.size()) digits += std::string(point - digits.size(), '0');
    d.whole = digits.substr(0, static_cast<size_t>(point));
    d.fraction = digits.substr(static_cast<size_t>(point));
  }
  d.whole.erase(0, std::min(d.whole.find_first_not_of('0'), d.whole.size() - 1));
  while (!d.fraction.empty() && d.fraction.back() == '0') d.fraction.pop_back();
  if (d.whole == "0" && d.fraction.empty()) d.negative = false;
  return d;
}

int compare_magnitude(const Decimal& a, const Decimal& b) {
  if (a.whole.size() != b.whole.size()) return a.whole.size() < b.whole.size() ? -1 : 1;
  if (a.whole != b.whole) return a.whole < b.whole ? -1 : 1;
  const size_t n = std::max(a.fraction.size(), b.fraction.size());
  const std::string fa = a.fraction + std::string(n - a.fraction.size(), '0');
  const std::string fb = b.fraction + std::string(n - b.fraction.size(), '0');
  return fa == fb ? 0 : (fa < fb ? -1 : 1);
}

int compare(const Decimal& a, const Decimal& b) {
  if (a.negative != b.negative) return a.negative ? -1 : 1;
  const int m = compare_magnitude(a, b);
  return a.negative ? -m : m;
}

std::string increment(std::string s) {
  for (size_t i = s.size(); i-- > 0;) {
    if (s[i] != '9') return ++s[i], s;
    s[i] = '0';
  }
  s.insert(s.begin(), '1');
  return s;
}

std::string decrement(std::string s) {  // s > 0
  for (size_t i = s.size(); i-- > 0;) {
    if (s[i] != '0') {
      --s[i];
      break;
    }
    s[i] = '9';
  }
  if (s.size() > 1 && s[0] == '0') s.erase(0, 1);
  return s;
}

bool less_int(const std::string& a, const std::string& b) {
  return a.size() != b.size() ? a.size() < b.size() : a < b;
}

// A set of fraction digit strings s (the digits after the point): whether the empty one (no fraction) is in
// it, and alternatives for the non-empty ones.
struct Lang {
  bool eps = false;
  std::vector<Sequence> more;
  bool empty() const { return !eps && more.empty(); }
};

class NumberBuilder {
 public:
  explicit NumberBuilder(SchemaCompiler& c) : c_(c) {}

  Element digit(char lo = '0', char hi = '9') {
    return lo == hi ? Grammar::literal(std::string(1, lo)) : Grammar::char_class({{uint32_t(lo), uint32_t(hi)}});
  }
  Element digits_star() { return c_.grammar.star(digit()); }
  Element digits_n(size_t n) { return c_.grammar.repeat(digit(), static_cast<int64_t>(n), static_cast<int64_t>(n)); }

  // What follows a digit whose continuations form `lang`.
  Sequence tail(const Lang& lang) {
    if (lang.more.empty()) return {};
    if (!lang.eps && lang.more.size() == 1) return lang.more[0];
    std::vector<Sequence> alternatives = lang.more;
    if (lang.eps) alternatives.push_back({});
    return {c_.rule("frac", std::move(alternatives))};
  }
  Sequence prefixed(char d, const Lang& lang) {
    Sequence seq{digit(d, d)};
    for (const Element& e : tail(lang)) c_.append_element(seq, e);
    return seq;
  }

  Lang any() { return {true, {{digit(), digits_star()}}}; }
  Lang zeros() { return {true, {{c_.grammar.plus(Grammar::literal("0"))}}}; }

  // 0.s > 0.f (>= unless strict).
  Lang greater(const std::string& f, bool strict) {
    if (f.empty()) return strict ? Lang{false, {{digits_star(), digit('1', '9'), digits_star()}}} : any();
    Lang out;
    if (f[0] < '9') out.more.push_back({digit(f[0] + 1, '9'), digits_star()});
    const Lang sub = greater(f.substr(1), strict);
    if (!sub.empty()) out.more.push_back(prefixed(f[0], sub));
    return out;
  }
  // 0.s < 0.f (<= unless strict).
  Lang less(const std::string& f, bool strict) {
    if (f.empty()) return strict ? Lang{} : zeros();
    Lang out{true, {}};  // f has a non-zero digit: no fraction is smaller
    if (f[0] > '0') out.more.push_back({digit('0', f[0] - 1), digits_star()});
    const Lang sub = less(f.substr(1), strict);
    if (!sub.empty()) out.more.push_back(prefixed(f[0], sub));
    return out;
  }
  // 0 < 0.s < 0.f (<= unless strict); f non-empty.
  Lang positive_below(const std::string& f, bool strict) {
    Lang out;
    if (f[0] == '0') {
      out.more.push_back(prefixed('0', positive_below(f.substr(1), strict)));
      return out;
    }
    out.more.push_back(prefixed('0', greater("", true)));
    if (f[0] >= '2') out.more.push_back({digit('1', f[0] - 1), digits_star()});
    const Lang sub = less(f.substr(1), strict);
    if (!sub.empty()) out.more.push_back(prefixed(f[0], sub));
    return out;
  }
  // 0.lo <= 0.s <= 0.hi, each bound strict or not.
  Lang between(const std::string& lo, const std::string& hi, bool lo_strict, bool hi_strict) {
    if (lo.empty() && hi.empty()) return (lo_strict || hi_strict) ? Lang{} : zeros();
    if (lo.empty()) return lo_strict ? positive_below(hi, hi_strict) : less(hi, hi_strict);
    if (hi.empty() || lo[0] > hi[0]) return {};
    Lang out;
    if (lo[0] == hi[0]) {
      const Lang sub = between(lo.substr(1), hi.substr(1), lo_strict, hi_strict);
      if (!sub.empty()) out.more.push_back(prefixed(lo[0], sub));
      return out;
    }
    const Lang low = greater(lo.substr(1), lo_strict);
    if (!low.empty()) out.more.push_back(prefixed(lo[0], low));
    if (hi[0] - lo[0] >= 2) out.more.push_back({digit(lo[0] + 1, hi[0] - 1), digits_star()});
    const Lang high = less(hi.substr(1), hi_strict);
    if (!high.empty()) out.more.push_back(prefixed(hi[0], high));
    return out;
  }

  // Digit strings of one length from a to b.
  std::vector<Sequence> fixed_range(const std::string& a, const std::string& b) {
    if (a.empty()) return {{}};
    const size_t n = a.size() - 1;
    if (a[0] == b[0]) {
      std::vector<Sequence> sub = fixed_range(a.substr(1), b.substr(1));
      Sequence seq{digit(a[0], a[0])};
      const Sequence rest = sub.size() == 1 ? sub[0] : Sequence{c_.rule("digits", std::move(sub))};
      for (const Element& e : rest) c_.append_element(seq, e);
      return {seq};
    }
    auto span = [&](char lo, char hi) {
      Sequence seq{digit(lo, hi)};
      if (n > 0) seq.push_back(digits_n(n));
      return seq;
    };
    if (a.find_first_not_of('0', 1) == std::string::npos && b.find_first_not_of('9', 1) == std::string::npos) {
      return {span(a[0], b[0])};
    }
    std::vector<Sequence> out;
    for (const auto& [d, lo, hi] : {std::tuple{a[0], a.substr(1), std::string(n, '9')},
                                    std::tuple{b[0], std::string(n, '0'), b.substr(1)}}) {
      std::vector<Sequence> sub = fixed_range(lo, hi);
      Sequence seq{digit(d, d)};
      const Sequence rest = sub.size() == 1 ? sub[0] : Sequence{c_.rule("digits", std::move(sub))};
      for (const Element& e : rest) c_.append_element(seq, e);
      out.push_back(seq);
      if (d == a[0] && b[0] - a[0] >= 2) out.push_back(span(a[0] + 1, b[0] - 1));
    }
    return out;
  }

  // Integers (no leading zeros) from a to b; b empty: no upper bound.
  std::vector<Sequence> int_range(const std::string& a, const std::string& b) {
    std::vector<Sequence> out;
    const size_t last = b.empty() ? a.size() : b.size();
    for (size_t length = a.size(); length <= last; ++length) {
      std::string lo = a;
      if (length != a.size()) lo = std::string(length, '0'), lo[0] = '1';
      const std::string hi = (!b.empty() && length == b.size()) ? b : std::string(length, '9');
      for (Sequence& seq : fixed_range(lo, hi)) out.push_back(std::move(seq));
    }
    if (b.empty()) out.push_back({digit('1', '9'), c_.grammar.repeat(digit(), static_cast<int64_t>(a.size()), -1)});
    return out;
  }

  // Integer parts with fractions from `lang` (for integers: no fraction, where the empty one is in lang).
  void piece(std::vector<Sequence> whole, const Lang& lang, bool integer, std::vector<Sequence>* out) {
    if (integer ? !lang.eps : lang.empty()) return;
    std::vector<Sequence> fraction;
    if (lang.eps) fraction.push_back({});
    if (!integer) {
      for (const Sequence& more : lang.more) {
        Sequence seq{Grammar::literal(".")};
        for (const Element& e : more) c_.append_element(seq, e);
        fraction.push_back(std::move(seq));
      }
    }
    Sequence seq = whole.size() == 1 ? whole[0] : Sequence{c_.rule("int", std::move(whole))};
    const Sequence rest = fraction.size() == 1 ? fraction[0] : Sequence{c_.rule("frac", std::move(fraction))};
    for (const Element& e : rest) c_.append_element(seq, e);
    out->push_back(std::move(seq));
  }

  // Non-negative values from a to b (b null: no upper bound).
  std::vector<Sequence> magnitudes(const Bound& a, const Bound* b, bool integer) {
    std::vector<Sequence> out;
    if (b != nullptr && compare(a.value, b->value) > 0) return out;
    const std::string& ia = a.value.whole;
    if (b != nullptr && ia == b->value.whole) {
      piece({{Grammar::literal(ia)}}, between(a.value.fraction, b->value.fraction, a.exclusive, b->exclusive), integer,
            &out);
      return out;
    }
    piece({{Grammar::literal(ia)}}, greater(a.value.fraction, a.exclusive), integer, &out);
    const std::string next = increment(ia);
    if (b == nullptr) {
      piece(int_range(next, ""), any(), integer, &out);
    } else {
      if (less_int(next, b->value.whole)) piece(int_range(next, decrement(b->value.whole)), any(), integer, &out);
      piece({{Grammar::literal(b->value.whole)}}, less(b->value.fraction, b->exclusive), integer, &out);
    }
    return out;
  }

 private:
  SchemaCompiler& c_;
};

// The tighter of two bounds on one side (`lower`: the larger value; on a tie the exclusive one).
std::optional<Bound> tighter(std::optional<Bound> a, std::optional<Bound> b, bool lower) {
  if (!a) return b;
  if (!b) return a;
  const int cmp = compare(a->value, b->value);
  if (cmp == 0) return a->exclusive ? a : b;
  return (cmp > 0) == lower ? a : b;
}

}  // namespace

Element SchemaCompiler::number_value(const Json& schema, const std::string& ptr, bool integer) {
  NumberBuilder b(*this);
  std::optional<Bound> lo, hi;
  for (const auto& [key, lower] : {std::pair{"minimum", true}, std::pair{"maximum", false}}) {
    if (!schema.contains(key)) continue;
    // Draft 4: exclusiveMinimum / exclusiveMaximum as booleans make minimum / maximum exclusive.
    const char* exclusive_key = lower ? "exclusiveMinimum" : "exclusiveMaximum";
    const bool exclusive = schema.contains(exclusive_key) && schema[exclusive_key] == true;
    (lower ? lo : hi) = Bound{parse_decimal(schema[key], key, ptr), exclusive};
  }
  for (const auto& [key, lower] : {std::pair{"exclusiveMinimum", true}, std::pair{"exclusiveMaximum", false}}) {
    if (!schema.contains(key) || schema[key].is_boolean()) continue;
    auto& side = lower ? lo : hi;
    side = tighter(side, Bound{parse_decimal(schema[key], key, ptr), true}, lower);
  }
  const Element digits_star = b.digits_star();
  if (!lo && !hi) {
    if (integer) {  // -?(0|[1-9][0-9]*) without "-0"
      return rule("integer", {{Grammar::literal("0")}, {grammar.optional(Grammar::literal("-")), b.digit('1', '9'), digits_star}});
    }
    const Element whole = rule("int", {{Grammar::literal("0")}, {b.digit('1', '9'), digits_star}});
    Sequence seq{grammar.optional(Grammar::literal("-")), whole};
    seq.push_back(grammar.optional(element_of({Grammar::literal("."), grammar.plus(b.digit())})));
    seq.push_back(grammar.optional(element_of({Grammar::char_class({{'E', 'E'}, {'e', 'e'}}),
                                               grammar.optional(Grammar::char_class({{'+', '+'}, {'-', '-'}})),
                                               grammar.repeat(b.digit(), 1, 2)})));
    return element_of(std::move(seq));
  }
  std::vector<Sequence> alternatives;
  const Bound zero{Decimal{}, false};
  // Non-negative values: from max(lo, 0) up to hi.
  if (!hi || !hi->value.negative) {
    const Bound from = (lo && !lo->value.negative) ? *lo : zero;
    alternatives = b.magnitudes(from, hi ? &*hi : nullptr, integer);
  }
  // Negative values: "-" and a magnitude above 0 (or |hi|) up to |lo|.
  if (!lo || lo->value.negative) {
    Bound from{Decimal{}, true};
    if (hi && hi->value.negative) from = *hi, from.value.negative = false;
    std::optional<Bound> to = lo;
    if (to) to->value.negative = false;
    if (!to || compare(from.value, to->value) <= 0) {
      for (Sequence& magnitude : b.magnitudes(from, to ? &*to : nullptr, integer)) {
        Sequence seq{Grammar::literal("-")};
        for (const Element& e : magnitude) append_element(seq, e);
        alternatives.push_back(std::move(seq));
      }
    }
  }
  if (lo && hi && compare(lo->value, hi->value) > 0) alternatives.clear();
  if (alternatives.empty()) refuse(fmt::format("no {} meets the bounds", integer ? "integer" : "number"), ptr);
  if (alternatives.size() == 1) return element_of(std::move(alternatives[0]));
  return rule(integer ? "integer" : "number", std::move(alternatives));
}

}  // namespace tide::grammar::detail

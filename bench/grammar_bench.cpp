// grammar_bench: the structured-output engine's costs on a real vocabulary, on one core. Reports the compile
// time, then walks outputs token by token as a request would (fill_mask, then accept_token) and reports the
// mask time per token: the first request (every grammar position and state seen for the first time) and the
// requests after it (steady state: other values, the same schema).
//
//   grammar_bench --tokenizer DIR [--gbnf FILE [--text FILE] | --schema FILE.json --text FILE] [--requests N]
//
// Without a grammar it uses a built-in schema of ~50 properties (nested objects, enums, arrays, numbers,
// free text), compiled by compile_json_schema when the JSON Schema compiler is built in, else by an
// equivalent GBNF, and walks seeded random documents of that schema, tokenized by the tokenizer. With
// --sample (or a grammar without --text) the walk samples uniformly among the allowed tokens instead.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <random>
#include <sstream>

#include "grammar/compiled_grammar.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "grammar/vocabulary.h"
#include "tokenizer/tokenizer.h"
#if __has_include("grammar/json_schema.h")
#include "grammar/json_schema.h"
#define TIDE_BENCH_HAS_JSON_SCHEMA 1
#endif

namespace {

using namespace tide::grammar;
using Clock = std::chrono::steady_clock;

double micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw tide::Error("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// ---- The built-in schema: fields described once, written as JSON Schema, as GBNF and as sample documents.
struct Field {
  enum class Type { kString, kInteger, kNumber, kBoolean, kEnum, kStringArray, kObject, kObjectArray } type;
  std::string name;
  std::vector<std::string> values;  // kEnum
  std::vector<Field> fields;        // kObject, kObjectArray
};

std::vector<Field> builtin_fields() {
  using T = Field::Type;
  const std::vector<Field> address{{T::kString, "street", {}, {}}, {T::kString, "city", {}, {}},
                                   {T::kString, "postal_code", {}, {}}, {T::kString, "country", {}, {}},
                                   {T::kNumber, "latitude", {}, {}}, {T::kNumber, "longitude", {}, {}}};
  const std::vector<Field> item{{T::kString, "sku", {}, {}}, {T::kString, "description", {}, {}},
                                {T::kInteger, "quantity", {}, {}}, {T::kNumber, "unit_price", {}, {}},
                                {T::kEnum, "currency", {"EUR", "USD", "GBP", "JPY", "CHF"}, {}}};
  std::vector<Field> f{{T::kString, "id", {}, {}},
                       {T::kString, "customer_name", {}, {}},
                       {T::kString, "email", {}, {}},
                       {T::kEnum, "status", {"pending", "processing", "shipped", "delivered", "cancelled", "refunded"}, {}},
                       {T::kEnum, "priority", {"low", "normal", "high", "urgent"}, {}},
                       {T::kInteger, "age", {}, {}},
                       {T::kBoolean, "is_member", {}, {}},
                       {T::kNumber, "total", {}, {}},
                       {T::kObject, "billing_address", {}, address},
                       {T::kObject, "shipping_address", {}, address},
                       {T::kObjectArray, "items", {}, item},
                       {T::kStringArray, "tags", {}, {}},
                       {T::kString, "notes", {}, {}},
                       {T::kEnum, "channel", {"web", "mobile_app", "phone", "in_store", "partner_api"}, {}},
                       {T::kInteger, "loyalty_points", {}, {}},
                       {T::kBoolean, "gift_wrap", {}, {}},
                       {T::kString, "created_at", {}, {}},
                       {T::kString, "summary", {}, {}},
                       {T::kObject, "contact", {}, {{T::kString, "phone", {}, {}}, {T::kString, "fax", {}, {}},
                                                    {T::kEnum, "preferred", {"email", "phone", "sms", "post"}, {}},
                                                    {T::kBoolean, "opt_in", {}, {}}}},
                       {T::kNumber, "discount", {}, {}},
                       {T::kNumber, "tax", {}, {}},
                       {T::kInteger, "items_count", {}, {}},
                       {T::kStringArray, "coupons", {}, {}},
                       {T::kEnum, "payment_method", {"card", "paypal", "bank_transfer", "invoice", "cash_on_delivery"}, {}},
                       {T::kString, "tracking_number", {}, {}},
                       {T::kString, "updated_at", {}, {}},
                       {T::kBoolean, "requires_signature", {}, {}}};
  return f;
}

nlohmann::ordered_json schema_of(const std::vector<Field>& fields) {
  nlohmann::ordered_json props = nlohmann::ordered_json::object(), required = nlohmann::ordered_json::array();
  for (const Field& f : fields) {
    nlohmann::ordered_json s;
    switch (f.type) {
      case Field::Type::kString: s = {{"type", "string"}}; break;
      case Field::Type::kInteger: s = {{"type", "integer"}}; break;
      case Field::Type::kNumber: s = {{"type", "number"}}; break;
      case Field::Type::kBoolean: s = {{"type", "boolean"}}; break;
      case Field::Type::kEnum: s = {{"type", "string"}, {"enum", f.values}}; break;
      case Field::Type::kStringArray: s = {{"type", "array"}, {"items", {{"type", "string"}}}}; break;
      case Field::Type::kObject: s = schema_of(f.fields); break;
      case Field::Type::kObjectArray: s = {{"type", "array"}, {"items", schema_of(f.fields)}}; break;
    }
    props[f.name] = s;
    required.push_back(f.name);
  }
  return {{"type", "object"}, {"properties", props}, {"required", required}, {"additionalProperties", false}};
}

// GBNF of the same language in the same layout (", " and ": " separators, members in order).
std::string gbnf_object(const std::vector<Field>& fields, const std::string& name, std::string& rules) {
  std::string body = "\"{\"";
  for (size_t i = 0; i < fields.size(); ++i) {
    const Field& f = fields[i];
    body += fmt::format(" \"{}\\\"{}\\\": \" ", i ? ", " : "", f.name);
    switch (f.type) {
      case Field::Type::kString: body += "string"; break;
      case Field::Type::kInteger: body += "integer"; break;
      case Field::Type::kNumber: body += "number"; break;
      case Field::Type::kBoolean: body += "( \"true\" | \"false\" )"; break;
      case Field::Type::kEnum: {
        body += "(";
        for (size_t k = 0; k < f.values.size(); ++k) body += fmt::format("{} \"\\\"{}\\\"\"", k ? " |" : "", f.values[k]);
        body += " )";
        break;
      }
      case Field::Type::kStringArray: body += "\"[\" ( string ( \", \" string )* )? \"]\""; break;
      case Field::Type::kObject: body += gbnf_object(f.fields, name + "-" + f.name, rules); break;
      case Field::Type::kObjectArray: {
        const std::string item = gbnf_object(f.fields, name + "-" + f.name, rules);
        body += fmt::format("\"[\" ( {0} ( \", \" {0} )* )? \"]\"", item);
        break;
      }
    }
  }
  rules += fmt::format("{} ::= {} \"}}\"\n", name, body);
  return name;
}

std::string builtin_gbnf(const std::vector<Field>& fields) {
  std::string rules;
  const std::string root = gbnf_object(fields, "obj", rules);
  return fmt::format("root ::= {}\n{}", root, rules) +
         "string ::= \"\\\"\" ( [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} ) )* \"\\\"\"\n"
         "integer ::= \"-\"? ( \"0\" | [1-9] [0-9]* )\n"
         "number ::= \"-\"? ( \"0\" | [1-9] [0-9]* ) ( \".\" [0-9]+ )? ( [eE] [-+]? [0-9]+ )?\n";
}

// A document of the schema with seeded realistic values, written in the layout.
std::string sample_document(const std::vector<Field>& fields, std::mt19937& rng) {
  static const char* const kText[] = {
      "Please deliver after 5 pm, the side door is usually open.", "Müller GmbH", "Zürich", "東京都渋谷区",
      "alex.morgan@example.com", "Order placed via the spring campaign; customer asked for eco packaging.",
      "42 Baker Street", "SW1A 1AA", "United Kingdom", "Wireless noise-cancelling headphones (black)",
      "2024-11-05T14:32:08Z", "Repeat customer, prefers \"express\" shipping \\ no calls.", "São Paulo",
      "Café crème – 250 g", "SKU-88213-B", "Returns accepted within 30 days.", "Lyon", "75002"};
  std::string out = "{";
  for (size_t i = 0; i < fields.size(); ++i) {
    const Field& f = fields[i];
    out += fmt::format("{}\"{}\": ", i ? ", " : "", f.name);
    const auto text = [&] {
      std::string s = "\"";
      for (const char c : std::string(kText[rng() % std::size(kText)])) {
        if (c == '"' || c == '\\') s.push_back('\\');
        s.push_back(c);
      }
      return s + "\"";
    };
    switch (f.type) {
      case Field::Type::kString: out += text(); break;
      case Field::Type::kInteger: out += std::to_string(static_cast<int>(rng() % 100000)); break;
      case Field::Type::kNumber: out += fmt::format("{}.{:02}", rng() % 5000, rng() % 100); break;
      case Field::Type::kBoolean: out += rng() % 2 ? "true" : "false"; break;
      case Field::Type::kEnum: out += "\"" + f.values[rng() % f.values.size()] + "\""; break;
      case Field::Type::kStringArray: {
        out += "[";
        for (uint32_t k = 0, n = rng() % 4; k < n; ++k) out += (k ? ", " : "") + text();
        out += "]";
        break;
      }
      case Field::Type::kObject: out += sample_document(f.fields, rng); break;
      case Field::Type::kObjectArray: {
        out += "[";
        for (uint32_t k = 0, n = 1 + rng() % 3; k < n; ++k) out += (k ? ", " : "") + sample_document(f.fields, rng);
        out += "]";
        break;
      }
    }
  }
  return out + "}";
}

size_t count_fields(const std::vector<Field>& fields) {
  size_t n = 0;
  for (const Field& f : fields) n += 1 + count_fields(f.fields);
  return n;
}

struct Summary {
  double median = 0, p90 = 0, p99 = 0, max = 0, mean = 0;
  size_t n = 0;
};

Summary summarize(std::vector<double> v) {
  Summary s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  const auto at = [&](double q) { return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))]; };
  s.median = at(0.5), s.p90 = at(0.9), s.p99 = at(0.99), s.max = v.back(), s.n = v.size();
  for (const double x : v) s.mean += x / static_cast<double>(v.size());
  return s;
}

void print(const std::string& what, const Summary& s) {
  fmt::print("  {:<34} n={:<6} median {:8.1f} us  p90 {:8.1f} us  p99 {:8.1f} us  max {:9.1f} us  mean {:8.1f} us\n",
             what, s.n, s.median, s.p90, s.p99, s.max, s.mean);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"grammar_bench: structured-output mask and compile timings"};
  std::string tokenizer_dir, gbnf_file, schema_file, text_file;
  int requests = 5, max_tokens = 400, cpu = -1;
  uint32_t seed = 1;
  bool sample = false, no_state_cache = false;
  int slowest = 0;
  app.add_option("--tokenizer", tokenizer_dir, "tokenizer folder (tokenizer.json)")->required();
  app.add_option("--gbnf", gbnf_file, "GBNF grammar file");
  app.add_option("--schema", schema_file, "JSON Schema file (needs the JSON Schema compiler)");
  app.add_option("--text", text_file, "an output of the grammar to walk (tokenized)");
  app.add_option("--requests", requests, "requests to walk (the first one cold)");
  app.add_option("--max-tokens", max_tokens, "tokens per request when sampling");
  app.add_option("--seed", seed, "seed of documents and sampling");
  app.add_option("--cpu", cpu, "pin to this CPU");
  app.add_option("--slowest", slowest, "list this many slowest masks (where and why)");
  app.add_flag("--no-state-cache", no_state_cache, "compute every mask from the per-position classifications");
  app.add_flag("--sample", sample, "sample uniformly among allowed tokens instead of walking documents");
  CLI11_PARSE(app, argc, argv);
  try {
    if (cpu >= 0) {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(cpu, &set);
      sched_setaffinity(0, sizeof(set), &set);
    }
    auto t0 = Clock::now();
    const tide::Tokenizer tokenizer = tide::Tokenizer::from_dir(tokenizer_dir);
    std::vector<int32_t> stops;
    if (tokenizer.eos_id()) stops.push_back(*tokenizer.eos_id());
    const auto vocabulary = TokenVocabulary::from_tokenizer(tokenizer, stops);
    fmt::print("vocabulary: {} tokens ({} distinct strings, longest {} bytes), built in {:.1f} ms\n", vocabulary->size(),
               vocabulary->string_count(), vocabulary->max_token_length(), micros(Clock::now() - t0) / 1000);

    const std::vector<Field> fields = builtin_fields();
    const bool builtin = gbnf_file.empty() && schema_file.empty();
    std::string source;
    t0 = Clock::now();
    Grammar grammar;
    if (!gbnf_file.empty()) {
      grammar = parse_gbnf(read_file(gbnf_file));
      source = "GBNF " + gbnf_file;
    } else {
#ifdef TIDE_BENCH_HAS_JSON_SCHEMA
      const auto schema = builtin ? schema_of(fields) : nlohmann::ordered_json::parse(read_file(schema_file));
      t0 = Clock::now();
      grammar = compile_json_schema(schema);
      source = builtin ? fmt::format("built-in schema ({} properties) via compile_json_schema", count_fields(fields))
                       : "JSON Schema " + schema_file;
#else
      if (!builtin) throw tide::Error("--schema needs the JSON Schema compiler (src/grammar/json_schema.h)");
      const std::string text = builtin_gbnf(fields);
      t0 = Clock::now();
      grammar = parse_gbnf(text);
      source = fmt::format("built-in schema ({} properties) as GBNF", count_fields(fields));
#endif
    }
    const auto t1 = Clock::now();
    CompileOptions options;
    if (no_state_cache) options.mask_cache_bytes = 0;
    const auto compiled = compile(grammar, vocabulary, options);
    const auto t2 = Clock::now();
    fmt::print("grammar: {}: {} rules, {} elements, {} byte-level nodes\n", source, grammar.rules.size(),
               grammar.element_count(), compiled->byte_grammar().node_count());
    fmt::print("compile: {:.2f} ms (to the IR {:.2f} ms, to bytes {:.2f} ms)\n", micros(t2 - t0) / 1000,
               micros(t1 - t0) / 1000, micros(t2 - t1) / 1000);

    const std::string fixed_text = text_file.empty() ? "" : read_file(text_file);
    sample = sample || (!builtin && text_file.empty());
    std::vector<uint32_t> mask(vocabulary->mask_words());
    std::vector<double> cold, warm, accept_times;
    std::mt19937 rng(seed);
    size_t total_tokens = 0;
    struct Slow {
      double us;
      int request, step;
      std::string before;
      uint64_t classified, checks;
    };
    std::vector<Slow> slow;
    std::string text_so_far;
    for (int r = 0; r < requests; ++r) {
      GrammarMatcher m(compiled, 0);
      std::vector<double>& times = r == 0 ? cold : warm;
      std::vector<int32_t> ids;
      text_so_far.clear();
      if (!sample) {
        const std::string text = builtin ? sample_document(fields, rng) : fixed_text;
        ids = tokenizer.encode(text, false);
        ids.insert(ids.end(), stops.begin(), stops.end());
      }
      for (int step = 0; sample ? step < max_tokens : step < static_cast<int>(ids.size()); ++step) {
        const auto before = compiled->stats();
        const auto a = Clock::now();
        m.fill_mask(mask);
        times.push_back(micros(Clock::now() - a));
        if (slowest > 0) {
          const auto after = compiled->stats();
          slow.push_back({times.back(), r, step, text_so_far.substr(text_so_far.size() - std::min<size_t>(40, text_so_far.size())),
                          after.nodes_classified - before.nodes_classified, after.context_checks - before.context_checks});
        }
        int32_t id = -1;
        if (sample) {
          std::vector<int32_t> allowed;
          for (int32_t t = 0; t < vocabulary->size(); ++t) {
            if ((mask[static_cast<size_t>(t) >> 5] >> (t & 31)) & 1u) allowed.push_back(t);
          }
          if (allowed.empty()) break;
          id = m.can_end() && !stops.empty() && rng() % 4 == 0 ? stops[0] : allowed[rng() % allowed.size()];
        } else {
          id = ids[static_cast<size_t>(step)];
          if (!((mask[static_cast<size_t>(id) >> 5] >> (id & 31)) & 1u)) {
            throw tide::Error(fmt::format("request {}: token {} ({:?}) at step {} is not in the mask", r, id,
                                          vocabulary->token_bytes(id), step));
          }
        }
        const auto b = Clock::now();
        if (!m.accept_token(id)) throw tide::Error(fmt::format("request {}: token {} refused at step {}", r, id, step));
        accept_times.push_back(micros(Clock::now() - b));
        ++total_tokens;
        if (slowest > 0 && !vocabulary->is_stop(id)) text_so_far += vocabulary->token_bytes(id);
        if (m.is_stopped()) break;
      }
    }
    fmt::print("walk: {} requests, {} tokens ({})\n", requests, total_tokens, sample ? "sampled" : "tokenized documents");
    print("mask, first request (cold)", summarize(cold));
    print("mask, later requests (steady)", summarize(warm));
    print("accept_token", summarize(accept_times));
    std::sort(slow.begin(), slow.end(), [](const Slow& a, const Slow& b) { return a.us > b.us; });
    for (size_t k = 0; k < slow.size() && k < static_cast<size_t>(slowest); ++k) {
      fmt::print("  slow: {:9.1f} us  request {} step {:4}  positions classified {}  context checks {:6}  after {:?}\n",
                 slow[k].us, slow[k].request, slow[k].step, slow[k].classified, slow[k].checks, slow[k].before);
    }
    const auto stats = compiled->stats();
    fmt::print("caches: {} positions classified, {} state masks computed, {} served from the cache, "
               "{} context-dependent token checks\n",
               stats.nodes_classified, stats.mask_cache_misses, stats.mask_cache_hits, stats.context_checks);
  } catch (const std::exception& e) {
    fmt::print(stderr, "grammar_bench: {}\n", e.what());
    return 1;
  }
  return 0;
}

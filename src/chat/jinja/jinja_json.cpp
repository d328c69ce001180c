// to_json: json.dumps(value, ensure_ascii=False, ...) as transformers' tojson filter calls it (see jinja_value.h).
#include <algorithm>
#include <cmath>

#include "chat/jinja/jinja_strings.h"
#include "chat/jinja/jinja_value.h"

namespace tide::jinja {

namespace {

void append_json_string(std::string& out, std::string_view text) {
  out.push_back('"');
  for (char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
}

std::string json_float(double number) {
  if (std::isnan(number)) return "NaN";
  if (std::isinf(number)) return number > 0 ? "Infinity" : "-Infinity";
  return py_float_repr(number);
}

std::string json_key(const Value& key) {
  switch (key.kind()) {
    case Value::Kind::kString:
      return key.as_string();
    case Value::Kind::kBool:
      return key.as_bool() ? "true" : "false";
    case Value::Kind::kInt:
      return std::to_string(key.as_int());
    case Value::Kind::kBigInt:
      return key.big_int_text();
    case Value::Kind::kFloat:
      return json_float(key.as_number());
    case Value::Kind::kNone:
      return "null";
    default:
      runtime_error("keys must be str, int, float, bool or None, not {}", key.type_name());
  }
}

class JsonWriter {
 public:
  explicit JsonWriter(const JsonOptions& options) : options_(options) {
    if (options.separators) {
      item_separator_ = options.separators->first;
      key_separator_ = options.separators->second;
    } else {
      item_separator_ = options.indent ? "," : ", ";
      key_separator_ = ": ";
    }
  }

  void write(const Value& value, int level) {
    switch (value.kind()) {
      case Value::Kind::kNone:
        out_ += "null";
        return;
      case Value::Kind::kBool:
        out_ += value.as_bool() ? "true" : "false";
        return;
      case Value::Kind::kInt:
        out_ += std::to_string(value.as_int());
        return;
      case Value::Kind::kBigInt:
        out_ += value.big_int_text();
        return;
      case Value::Kind::kFloat:
        out_ += json_float(value.as_number());
        return;
      case Value::Kind::kString:
        append_json_string(out_, value.as_string());
        return;
      case Value::Kind::kList:
        if (value.sequence_kind() != SequenceKind::kIterator) return write_list(value.items(), level);
        break;
      case Value::Kind::kDict:
        return write_dict(value.as_dict(), level);
      default:
        break;
    }
    runtime_error("Object of type {} is not JSON serializable", value.type_name());
  }

  std::string take() { return std::move(out_); }

 private:
  void newline(int level) {
    if (!options_.indent) return;
    out_.push_back('\n');
    for (int i = 0; i < level; ++i) out_ += *options_.indent;
  }

  void write_list(const std::vector<Value>& items, int level) {
    if (items.empty()) {
      out_ += "[]";
      return;
    }
    out_.push_back('[');
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out_ += item_separator_;
      newline(level + 1);
      write(items[i], level + 1);
    }
    newline(level);
    out_.push_back(']');
  }

  void write_dict(const Dict& dict, int level) {
    if (dict.empty()) {
      out_ += "{}";
      return;
    }
    std::vector<const std::pair<Value, Value>*> entries;
    for (const auto& entry : dict.entries()) entries.push_back(&entry);
    if (options_.sort_keys) {
      std::stable_sort(entries.begin(), entries.end(),
                       [](const auto* a, const auto* b) { return compare(a->first, b->first) < 0; });
    }
    out_.push_back('{');
    for (size_t i = 0; i < entries.size(); ++i) {
      if (i > 0) out_ += item_separator_;
      newline(level + 1);
      append_json_string(out_, json_key(entries[i]->first));
      out_ += key_separator_;
      write(entries[i]->second, level + 1);
    }
    newline(level);
    out_.push_back('}');
  }

  const JsonOptions& options_;
  std::string item_separator_;
  std::string key_separator_;
  std::string out_;
};

}  // namespace

std::string to_json(const Value& value, const JsonOptions& options) {
  JsonWriter writer(options);
  writer.write(value, 0);
  return writer.take();
}

}  // namespace tide::jinja

#include "server/metrics.h"

#include <cmath>
#include <cstdio>

#include "core/error.h"

namespace tide::server {

std::string format_metric_value(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buf[64];
  if (value == std::floor(value) && std::fabs(value) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.0f", value);
  } else {
    std::snprintf(buf, sizeof buf, "%.12g", value);
  }
  return buf;
}

std::string escape_label_value(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

void MetricsRegistry::add(std::string name, std::string help, Type type, std::vector<double> bounds) {
  std::lock_guard lock(mutex_);
  if (find(name) != nullptr) fail("metric {} declared twice", name);
  for (size_t i = 1; i < bounds.size(); ++i) TIDE_CHECK(bounds[i] > bounds[i - 1]);
  families_.push_back(Family{std::move(name), std::move(help), type, std::move(bounds), {}});
}

void MetricsRegistry::add_counter(const std::string& name, const std::string& help) {
  add(name, help, Type::kCounter, {});
}
void MetricsRegistry::add_gauge(const std::string& name, const std::string& help) { add(name, help, Type::kGauge, {}); }
void MetricsRegistry::add_histogram(const std::string& name, const std::string& help, std::vector<double> bounds) {
  add(name, help, Type::kHistogram, std::move(bounds));
}

const MetricsRegistry::Family* MetricsRegistry::find(const std::string& name) const {
  for (const Family& f : families_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

MetricsRegistry::Family& MetricsRegistry::family(const std::string& name, Type type) {
  Family* f = const_cast<Family*>(find(name));
  if (f == nullptr) fail("metric {} was not declared", name);
  const bool ok = f->type == type || (type == Type::kGauge && f->type == Type::kCounter);  // set() on counters
  if (!ok) fail("metric {} has another type", name);
  return *f;
}

void MetricsRegistry::increment(const std::string& name, double by, const Labels& labels) {
  std::lock_guard lock(mutex_);
  if (!(by >= 0)) fail("counter {} cannot go down", name);
  family(name, Type::kCounter).series[labels].value += by;
}

void MetricsRegistry::set(const std::string& name, double value, const Labels& labels) {
  std::lock_guard lock(mutex_);
  family(name, Type::kGauge).series[labels].value = value;
}

void MetricsRegistry::observe(const std::string& name, double value, const Labels& labels) {
  std::lock_guard lock(mutex_);
  Family& f = family(name, Type::kHistogram);
  Series& s = f.series[labels];
  if (s.bucket_counts.empty()) s.bucket_counts.assign(f.bounds.size() + 1, 0);
  size_t bucket = 0;
  while (bucket < f.bounds.size() && value > f.bounds[bucket]) ++bucket;
  ++s.bucket_counts[bucket];
  s.sum += value;
  ++s.count;
}

double MetricsRegistry::value(const std::string& name, const Labels& labels) const {
  std::lock_guard lock(mutex_);
  const Family* f = find(name);
  if (f == nullptr) return 0;
  const auto it = f->series.find(labels);
  return it == f->series.end() ? 0 : it->second.value;
}

namespace {

// {a="x",b="y"} with `extra` appended (le for buckets); empty when there are no labels.
std::string label_text(const Labels& labels, const std::pair<std::string, std::string>* extra = nullptr) {
  if (labels.empty() && extra == nullptr) return "";
  std::string out = "{";
  bool first = true;
  auto add = [&](const std::pair<std::string, std::string>& kv) {
    if (!first) out += ",";
    first = false;
    out += kv.first + "=\"" + escape_label_value(kv.second) + "\"";
  };
  for (const auto& kv : labels) add(kv);
  if (extra != nullptr) add(*extra);
  return out + "}";
}

const char* type_name(MetricsRegistry::Type type) {
  switch (type) {
    case MetricsRegistry::Type::kCounter: return "counter";
    case MetricsRegistry::Type::kGauge: return "gauge";
    case MetricsRegistry::Type::kHistogram: return "histogram";
  }
  return "untyped";
}

}  // namespace

std::string MetricsRegistry::render() const {
  std::lock_guard lock(mutex_);
  std::string out;
  for (const Family& f : families_) {
    out += "# HELP " + f.name + " " + f.help + "\n";
    out += "# TYPE " + f.name + " " + type_name(f.type) + "\n";
    if (f.type != Type::kHistogram) {
      // A family without series still shows its zero (unlabelled families only), so scrapers see it at once.
      if (f.series.empty()) out += f.name + " 0\n";
      for (const auto& [labels, s] : f.series) out += f.name + label_text(labels) + " " + format_metric_value(s.value) + "\n";
      continue;
    }
    std::map<Labels, Series> series = f.series;
    if (series.empty()) series[{}].bucket_counts.assign(f.bounds.size() + 1, 0);
    for (const auto& [labels, s] : series) {
      uint64_t cumulative = 0;
      for (size_t b = 0; b <= f.bounds.size(); ++b) {
        cumulative += s.bucket_counts[b];
        const std::pair<std::string, std::string> le{"le", b < f.bounds.size() ? format_metric_value(f.bounds[b]) : "+Inf"};
        out += f.name + "_bucket" + label_text(labels, &le) + " " + std::to_string(cumulative) + "\n";
      }
      out += f.name + "_sum" + label_text(labels) + " " + format_metric_value(s.sum) + "\n";
      out += f.name + "_count" + label_text(labels) + " " + std::to_string(s.count) + "\n";
    }
  }
  return out;
}

}  // namespace tide::server

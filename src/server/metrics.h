// MetricsRegistry: counters, gauges and histograms with labels, rendered in Prometheus' text exposition format
// (version 0.0.4). Thread-safe; families are declared once, then updated by name. Not a general client
// library: no summaries, no exemplars, no timestamps.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace tide::server {

// Label pairs in the order they are rendered, e.g. {{"pool", "window_16"}}.
using Labels = std::vector<std::pair<std::string, std::string>>;

class MetricsRegistry {
 public:
  enum class Type { kCounter, kGauge, kHistogram };

  void add_counter(const std::string& name, const std::string& help);
  void add_gauge(const std::string& name, const std::string& help);
  // `bounds`: the upper bounds of the buckets, increasing (+Inf is added).
  void add_histogram(const std::string& name, const std::string& help, std::vector<double> bounds);

  // Counters only go up: `by` >= 0.
  void increment(const std::string& name, double by = 1, const Labels& labels = {});
  // Gauges; also counters whose total is kept elsewhere (the engine's token counters).
  void set(const std::string& name, double value, const Labels& labels = {});
  void observe(const std::string& name, double value, const Labels& labels = {});

  // The value of a counter or gauge series (0 when absent); for tests and logs.
  double value(const std::string& name, const Labels& labels = {}) const;

  // Every family in declaration order: # HELP, # TYPE, then its series (histograms: _bucket{le=...} cumulative,
  // _sum, _count).
  std::string render() const;

 private:
  struct Series {
    double value = 0;                  // counter / gauge
    std::vector<uint64_t> bucket_counts;  // histogram: per bound, then +Inf (not cumulative)
    double sum = 0;
    uint64_t count = 0;
  };
  struct Family {
    std::string name;
    std::string help;
    Type type;
    std::vector<double> bounds;
    std::map<Labels, Series> series;
  };

  Family& family(const std::string& name, Type type);
  const Family* find(const std::string& name) const;
  void add(std::string name, std::string help, Type type, std::vector<double> bounds);

  mutable std::mutex mutex_;
  std::vector<Family> families_;
};

// Prometheus' rendering of a sample value: integers without a fraction, +Inf / -Inf / NaN spelled out.
std::string format_metric_value(double value);
// A label value with backslash, double quote and newline escaped.
std::string escape_label_value(const std::string& value);

}  // namespace tide::server

#include "apps/tide/bench_serve/stats.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <numeric>

#include <fmt/format.h>

#include "core/comma_list.h"
#include "core/error.h"

namespace tide::bench {

double percentile_of_sorted(const std::vector<double>& sorted, double p) {
  TIDE_CHECK(!sorted.empty() && p >= 0 && p <= 100);
  const double rank = p / 100.0 * static_cast<double>(sorted.size() - 1);
  const auto below = static_cast<size_t>(std::floor(rank));
  const size_t above = std::min(below + 1, sorted.size() - 1);
  const double frac = rank - static_cast<double>(below);
  return sorted[below] + (sorted[above] - sorted[below]) * frac;
}

Summary summarize(std::vector<double> values, const std::vector<double>& percentiles) {
  Summary s;
  s.count = values.size();
  if (values.empty()) {
    for (double p : percentiles) s.percentiles.emplace_back(p, 0.0);
    return s;
  }
  std::sort(values.begin(), values.end());
  const double n = static_cast<double>(values.size());
  s.mean = std::accumulate(values.begin(), values.end(), 0.0) / n;
  double squares = 0;
  for (double v : values) squares += (v - s.mean) * (v - s.mean);
  s.std = std::sqrt(squares / n);
  s.median = percentile_of_sorted(values, 50);
  for (double p : percentiles) s.percentiles.emplace_back(p, percentile_of_sorted(values, p));
  return s;
}

std::vector<double> parse_percentiles(const std::string& text, const std::string& flag) {
  std::vector<double> out;
  for (const std::string& item : split_comma_list(text)) {
    char* end = nullptr;
    const double p = item.empty() ? NAN : std::strtod(item.c_str(), &end);
    if (item.empty() || end != item.c_str() + item.size() || !(p > 0 && p <= 100)) {
      fail("{}: '{}' is not a percentile (expected numbers in (0, 100] separated by commas)", flag, item);
    }
    out.push_back(p);
  }
  return out;
}

std::string percentile_name(double p) {
  if (p == std::floor(p)) return fmt::format("{}", static_cast<int64_t>(p));
  return fmt::format("{}", p);
}

}  // namespace tide::bench

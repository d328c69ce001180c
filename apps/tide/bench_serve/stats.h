// Summary statistics of latency samples as `vllm bench serve` reports them: mean, median, population standard
// deviation and percentiles interpolated linearly between the closest ranks (numpy.percentile's default), so
// the two benchmarks' figures compare. An empty sample summarizes to zeros, as vLLM's does.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace tide::bench {

struct Summary {
  size_t count = 0;
  double mean = 0;
  double median = 0;
  double std = 0;  // population standard deviation (divides by count)
  std::vector<std::pair<double, double>> percentiles;  // (p in [0, 100], value), in the order asked
};

// The p-th percentile (0 <= p <= 100) of `sorted` (ascending, non-empty): the value at rank p/100 * (n - 1),
// interpolated linearly between the two closest samples.
double percentile_of_sorted(const std::vector<double>& sorted, double p);

// Summarizes `values` (any order) with the given percentiles.
Summary summarize(std::vector<double> values, const std::vector<double>& percentiles);

// Parses "50,90,99" (spaces allowed): each in (0, 100]. Throws tide::Error naming `flag` otherwise.
std::vector<double> parse_percentiles(const std::string& text, const std::string& flag);

// The name of a percentile in reports and JSON keys: 99 -> "99", 99.9 -> "99.9".
std::string percentile_name(double p);

}  // namespace tide::bench

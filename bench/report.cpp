#include "bench/report.h"

#include <fmt/format.h>

namespace tide::bench {
namespace {

constexpr const char* kRowFormat = "{:<10} {:<30} {:<34} {:>10} {:>11} {:>9} {:>9} {:>7}  {}\n";

std::string number(const std::optional<double>& v, double scale, int decimals) {
  return v ? fmt::format("{:.{}f}", *v * scale, decimals) : "-";
}

nlohmann::json or_null(const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(); }

}  // namespace

std::optional<double> Report::fraction(const BenchRow& row) const {
  if (row.section == "ceiling") return std::nullopt;  // the ceilings themselves
  const double gemm = row.fp8 ? ceilings_.fp8_gemm_flops_per_s : ceilings_.gemm_flops_per_s;
  if (row.flops_per_s && gemm > 0) return *row.flops_per_s / gemm;
  // Decode reads (weights, KV); the read ceiling is what a step's bytes can at best stream at.
  const double bandwidth = ceilings_.read_bytes_per_s > 0 ? ceilings_.read_bytes_per_s : ceilings_.copy_bytes_per_s;
  if (row.bytes_per_s && bandwidth > 0) return *row.bytes_per_s / bandwidth;
  return std::nullopt;
}

void Report::print_table_header() {
  fmt::print(out_, kRowFormat, "section", "what", "shape", "time ms", "tok/s", "GB/s", "TFLOP/s", "% ceil", "");
  std::fflush(out_);
}

void Report::add(BenchRow row) {
  const std::optional<double> frac = fraction(row);
  fmt::print(out_, kRowFormat, row.section, row.what, row.shape, number(row.time_ms, 1.0, 3),
             number(row.tok_per_s, 1.0, 1), number(row.bytes_per_s, 1e-9, 0), number(row.flops_per_s, 1e-12, 1),
             number(frac, 100.0, 1), row.note);
  std::fflush(out_);
  rows_.push_back(std::move(row));
}

nlohmann::json Report::to_json() const {
  nlohmann::json j = header_;
  j["ceilings"] = {{"copy_bytes_per_s", ceilings_.copy_bytes_per_s},
                   {"read_bytes_per_s", ceilings_.read_bytes_per_s},
                   {"gemm_flops_per_s", ceilings_.gemm_flops_per_s},
                   {"fp8_gemm_flops_per_s", ceilings_.fp8_gemm_flops_per_s}};
  nlohmann::json rows = nlohmann::json::array();
  for (const BenchRow& r : rows_) {
    rows.push_back({{"section", r.section},
                    {"what", r.what},
                    {"shape", r.shape},
                    {"time_ms", or_null(r.time_ms)},
                    {"tok_per_s", or_null(r.tok_per_s)},
                    {"bytes_per_s", or_null(r.bytes_per_s)},
                    {"flops_per_s", or_null(r.flops_per_s)},
                    {"fraction_of_ceiling", or_null(fraction(r))},
                    {"fp8", r.fp8},
                    {"note", r.note},
                    {"details", r.details}});
  }
  j["rows"] = std::move(rows);
  return j;
}

}  // namespace tide::bench

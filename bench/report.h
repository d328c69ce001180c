// Report: the rows a benchmark run measures, printed as a table as they come (so a run cut short still
// shows what it measured) and at the end as one JSON object. Reports figures; never passes or fails.
#pragma once

#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace tide::bench {

// Ceilings measured in the same run; the percentages of bandwidth and compute rows refer to them.
struct Ceilings {
  double copy_bytes_per_s = 0;      // device-to-device copy, bytes read + written per second
  double read_bytes_per_s = 0;      // weight bytes read per second by cuBLASLt's bf16 GEMV of the logits matrix
  double gemm_flops_per_s = 0;      // cuBLASLt bf16 GEMM 8192^3 through CudaBackend::matmul
  double fp8_gemm_flops_per_s = 0;  // cuBLASLt FP8 GEMM 8192^3 (row / token scales) through matmul_fp8
};

struct BenchRow {
  BenchRow(std::string section_, std::string what_, std::string shape_ = "", std::string note_ = "")
      : section(std::move(section_)), what(std::move(what_)), shape(std::move(shape_)), note(std::move(note_)) {}

  std::string section;  // "ceiling", "decode", "prefill", "attention"
  std::string what;
  std::string shape;
  std::optional<double> time_ms;
  std::optional<double> tok_per_s;
  std::optional<double> bytes_per_s;  // shown as GB/s; a fraction of the read ceiling (copy before it is measured)
  std::optional<double> flops_per_s;  // shown as TFLOP/s; a fraction of the bf16 or (fp8) the FP8 GEMM ceiling
  bool fp8 = false;                   // FLOPs of FP8 matmuls
  std::string note;                   // "skipped: ...", "error: ..." or empty
  nlohmann::json details = nlohmann::json::object();  // counts behind the figures (bytes, FLOPs, runs)
};

class Report {
 public:
  explicit Report(std::FILE* out) : out_(out) {}

  void set_ceilings(const Ceilings& c) { ceilings_ = c; }
  const Ceilings& ceilings() const { return ceilings_; }
  // Facts about the run (model, device, options) that go into the JSON object.
  nlohmann::json& header() { return header_; }

  void print_table_header();
  // Records the row and prints it at once.
  void add(BenchRow row);
  nlohmann::json to_json() const;

 private:
  std::optional<double> fraction(const BenchRow& row) const;

  std::FILE* out_;
  Ceilings ceilings_;
  nlohmann::json header_ = nlohmann::json::object();
  std::vector<BenchRow> rows_;
};

}  // namespace tide::bench

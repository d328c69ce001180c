// A timeline of the GPU's kernels through CUPTI's activity API (libcupti, loaded at run time: the GPU machine
// may lack it): each kernel's stream, start and end, launch shape and name, also for kernels replayed from a
// CUDA graph. For finding the gaps and serial chains of a decode step, which step times alone do not show.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tide::bench {

struct KernelRecord {
  uint32_t stream = 0;
  uint64_t start_ns = 0, end_ns = 0;
  int grid = 0, block = 0, registers = 0, shared_bytes = 0;
  std::string name;  // demangled, without parameter lists
};

// Records every kernel that runs while it lives (one at a time per process). Throws tide::Error when
// libcupti cannot be loaded or CUPTI refuses.
class KernelTrace {
 public:
  KernelTrace();
  ~KernelTrace();
  KernelTrace(const KernelTrace&) = delete;
  KernelTrace& operator=(const KernelTrace&) = delete;

  // Waits for the device's pending records and returns all recorded so far, by start time.
  std::vector<KernelRecord> finish();
};

// Writes records as CSV (times in ns from the first start): stream,start,end,duration,grid,block,regs,smem,name.
void write_trace_csv(const std::string& path, const std::vector<KernelRecord>& records);

}  // namespace tide::bench

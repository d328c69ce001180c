// CUPTI's activity API through dlopen: the functions are looked up in libcupti.so.13 (or libcupti.so) when
// a trace starts, so tide_bench runs on machines without CUPTI as long as --trace is not asked for.
#include "bench/kernel_trace.h"

#include <cupti.h>
#include <cxxabi.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>

#include "core/error.h"

namespace tide::bench {
namespace {

struct Cupti {
  void* library = nullptr;
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&cuptiActivityEnable) enable = nullptr;
  decltype(&cuptiActivityDisable) disable = nullptr;
  decltype(&cuptiActivityFlushAll) flush_all = nullptr;
  decltype(&cuptiActivityGetNextRecord) next_record = nullptr;
  decltype(&cuptiGetResultString) result_string = nullptr;
};

Cupti load_cupti() {
  Cupti c;
  for (const char* name : {"libcupti.so.13", "libcupti.so"}) {
    c.library = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (c.library != nullptr) break;
  }
  if (c.library == nullptr) fail("--trace: cannot load libcupti.so.13 (CUDA's CUPTI): {}", dlerror());
  auto get = [&](auto& fn, const char* symbol) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(c.library, symbol));
    if (fn == nullptr) fail("--trace: libcupti has no {}", symbol);
  };
  get(c.register_callbacks, "cuptiActivityRegisterCallbacks");
  get(c.enable, "cuptiActivityEnable");
  get(c.disable, "cuptiActivityDisable");
  get(c.flush_all, "cuptiActivityFlushAll");
  get(c.next_record, "cuptiActivityGetNextRecord");
  get(c.result_string, "cuptiGetResultString");
  return c;
}

// CUPTI calls back without a user pointer: the one live trace's state is process-wide.
std::mutex state_mutex;
Cupti* cupti = nullptr;
std::vector<KernelRecord>* records = nullptr;

void check(CUptiResult result, const char* what) {
  if (result == CUPTI_SUCCESS) return;
  const char* text = "unknown";
  if (cupti != nullptr) cupti->result_string(result, &text);
  fail("--trace: {} failed: {}", what, text);
}

std::string short_name(const char* mangled) {
  if (mangled == nullptr) return "?";
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> demangled(abi::__cxa_demangle(mangled, nullptr, nullptr, &status),
                                                        &std::free);
  std::string name = status == 0 && demangled ? demangled.get() : mangled;
  // Drop the parameter list (the last top-level parenthesis group) and the namespaces before the function.
  if (!name.empty() && name.back() == ')') {
    int depth = 0;
    for (size_t i = name.size(); i-- > 0;) {
      if (name[i] == ')') ++depth;
      if (name[i] == '(' && --depth == 0) {
        name.resize(i);
        break;
      }
    }
  }
  for (const char* prefix : {"void ", "tide::cuda::(anonymous namespace)::", "tide::cuda::"}) {
    if (name.rfind(prefix, 0) == 0) name.erase(0, std::string(prefix).size());
  }
  return name;
}

constexpr size_t kBufferBytes = size_t{8} << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = kBufferBytes;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid_size) {
  {
    const std::lock_guard lock(state_mutex);
    CUpti_Activity* record = nullptr;
    while (cupti != nullptr && records != nullptr &&
           cupti->next_record(buffer, valid_size, &record) == CUPTI_SUCCESS) {
      if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && record->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      KernelRecord r;
      r.stream = k->streamId;
      r.start_ns = k->start;
      r.end_ns = k->end;
      r.grid = k->gridX * k->gridY * k->gridZ;
      r.block = k->blockX * k->blockY * k->blockZ;
      r.registers = k->registersPerThread;
      r.shared_bytes = k->staticSharedMemory + k->dynamicSharedMemory;
      r.name = short_name(k->name);
      records->push_back(std::move(r));
    }
  }
  std::free(buffer);
}

}  // namespace

KernelTrace::KernelTrace() {
  const std::lock_guard lock(state_mutex);
  if (cupti != nullptr) fail("--trace: a kernel trace is already running");
  cupti = new Cupti(load_cupti());
  records = new std::vector<KernelRecord>();
  try {
    check(cupti->register_callbacks(buffer_requested, buffer_completed), "cuptiActivityRegisterCallbacks");
    check(cupti->enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "cuptiActivityEnable");
  } catch (...) {  // no destructor runs: leave no trace behind for the next one
    delete records;
    records = nullptr;
    delete cupti;
    cupti = nullptr;
    throw;
  }
}

KernelTrace::~KernelTrace() {
  if (cupti != nullptr) {
    cupti->disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    cupti->flush_all(1);
  }
  const std::lock_guard lock(state_mutex);
  delete records;
  records = nullptr;
  delete cupti;  // the library stays loaded: CUPTI keeps its own threads
  cupti = nullptr;
}

std::vector<KernelRecord> KernelTrace::finish() {
  check(cupti->flush_all(1), "cuptiActivityFlushAll");
  const std::lock_guard lock(state_mutex);
  std::vector<KernelRecord> out = *records;
  std::sort(out.begin(), out.end(), [](const KernelRecord& a, const KernelRecord& b) { return a.start_ns < b.start_ns; });
  return out;
}

void write_trace_csv(const std::string& path, const std::vector<KernelRecord>& records) {
  std::ofstream out(path);
  if (!out) fail("--trace: cannot write {}", path);
  const uint64_t t0 = records.empty() ? 0 : records.front().start_ns;
  out << "stream,start_ns,end_ns,duration_ns,grid,block,registers,shared_bytes,name\n";
  for (const KernelRecord& r : records) {
    std::string name = r.name;
    std::replace(name.begin(), name.end(), ',', ';');
    out << fmt::format("{},{},{},{},{},{},{},{},{}\n", r.stream, r.start_ns - t0, r.end_ns - t0, r.end_ns - r.start_ns,
                       r.grid, r.block, r.registers, r.shared_bytes, name);
  }
  if (!out) fail("--trace: cannot write {}", path);
}

}  // namespace tide::bench

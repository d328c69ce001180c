// parallel_for: a range of independent items split over a few host threads, for the host work of loading
// weights (copies into pinned staging, format conversions, the CPU backend's rowwise quantization). Plain
// std::thread per call, no pool: callers give it work of milliseconds or more, where starting threads costs
// little. Non-goals: nested parallelism, work stealing, scheduling anything but equal slices.
#pragma once

#include <algorithm>
#include <cstdint>
#include <exception>
#include <thread>
#include <vector>

namespace tide {

// Calls fn(begin, end) on disjoint slices covering [0, n), each at least `min_items` long (the last may be
// shorter), on up to max_threads threads (0: the hardware's count, at most 16); the calling thread takes the
// first slice. Returns when every slice is done; rethrows the first exception a slice threw.
template <typename Fn>
void parallel_for(int64_t n, int64_t min_items, Fn&& fn, int max_threads = 0) {
  if (n <= 0) return;
  const int hardware = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int64_t limit = max_threads > 0 ? max_threads : std::min(hardware, 16);
  const int64_t slices = std::clamp<int64_t>(n / std::max<int64_t>(min_items, 1), 1, limit);
  if (slices == 1) {
    fn(int64_t{0}, n);
    return;
  }
  const int64_t per = (n + slices - 1) / slices;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(slices));
  std::vector<std::thread> threads;
  auto run = [&](int64_t s) {
    try {
      fn(s * per, std::min(n, (s + 1) * per));
    } catch (...) {
      errors[static_cast<size_t>(s)] = std::current_exception();
    }
  };
  for (int64_t s = 1; s < slices && s * per < n; ++s) threads.emplace_back(run, s);
  run(0);
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace tide

#include "core/log.h"

#include <cstdio>
#include <mutex>

namespace tide {
namespace {

std::mutex& log_mutex() {
  static std::mutex m;
  return m;
}

LogSink& log_sink() {
  static LogSink sink;
  return sink;
}

}  // namespace

void set_log_sink(LogSink sink) {
  std::lock_guard lock(log_mutex());
  log_sink() = std::move(sink);
}

void log_line(const std::string& line) {
  std::lock_guard lock(log_mutex());
  if (log_sink()) {
    log_sink()(line);
  } else {
    std::fprintf(stderr, "tide: %s\n", line.c_str());
    std::fflush(stderr);
  }
}

}  // namespace tide

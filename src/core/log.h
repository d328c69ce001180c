// One line of the engine's log: what the runtime reports that no caller asked for (a failed step, a request
// ended with an error, the step size lowered for memory). By default to stderr; a program replaces the sink
// (`tide serve` writes them in its own log format). Thread-safe.
#pragma once

#include <functional>
#include <string>

#include <fmt/format.h>

namespace tide {

using LogSink = std::function<void(const std::string& line)>;

// Replaces the sink (an empty one restores stderr).
void set_log_sink(LogSink sink);
void log_line(const std::string& line);

template <typename... Args>
void log_info(fmt::format_string<Args...> format, Args&&... args) {
  log_line(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace tide

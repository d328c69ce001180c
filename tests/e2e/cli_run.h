// Runs the tide program as users and scripts do, for the tests of its command line: the exit status and what
// it printed (stdout and stderr together).
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace tide::test {

struct RunResult {
  int status = -1;  // exit status; -1 when killed by a signal
  std::string out;  // stdout and stderr together
};

// `args` go through the shell: quote what needs quoting.
inline RunResult run_tide(const std::string& args) {
  const std::string command = std::string(TIDE_BINARY) + " " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) throw std::runtime_error("popen failed");
  RunResult r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(pipe);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace tide::test

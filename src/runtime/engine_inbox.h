// The engine's inbox (private to src/runtime): what submit() and cancel() hand the step loop's thread, under
// one mutex, and how the loop is woken. engine.cpp fills it, engine_loop.cpp drains it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/engine.h"

namespace tide {

struct Engine::Submission {
  std::shared_ptr<RequestHandle> handle;
  std::vector<int32_t> prompt;
  GenerateOptions options;
  PromptLogits prompt_logits = PromptLogits::kNone;
};

struct Engine::Inbox {
  std::mutex mutex;
  std::condition_variable wake;
  std::vector<Submission> submissions;
  std::vector<uint64_t> cancels;  // handle ids
  bool stop = false;
  uint64_t next_id = 1;
};

}  // namespace tide

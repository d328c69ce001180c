#include "runtime/generation.h"

namespace tide {

void SampleResult::add(const SampleDelta& delta) {
  ids.insert(ids.end(), delta.ids.begin(), delta.ids.end());
  text += delta.text;
  logprobs.insert(logprobs.end(), delta.logprobs.begin(), delta.logprobs.end());
  if (delta.finished()) {
    finish_reason = to_string(delta.finish_reason);
    error = delta.error;
    cached_tokens = delta.cached_tokens;
    num_preemptions = delta.num_preemptions;
  }
}

RequestHandle::RequestHandle(uint64_t id, int num_samples, std::function<void(uint64_t)> cancel,
                             DeltaCallback callback)
    : id_(id), num_samples_(num_samples), cancel_(std::move(cancel)), callback_(std::move(callback)) {}

void RequestHandle::cancel() {
  {
    std::lock_guard lock(mutex_);
    if (cancel_asked_ || num_finished_ == num_samples_) return;
    cancel_asked_ = true;
  }
  cancel_(id_);
}

void RequestHandle::deliver(SampleDelta&& delta) {
  const bool finished = delta.finished();
  if (callback_) {
    try {
      callback_(std::move(delta));
    } catch (...) {
      cancel();  // the caller cannot take more: end the request
    }
    if (finished) {
      std::lock_guard lock(mutex_);
      ++num_finished_;
    }
    ready_.notify_all();
    return;
  }
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(delta));
    if (finished) ++num_finished_;
  }
  ready_.notify_all();
}

std::optional<SampleDelta> RequestHandle::next() {
  std::unique_lock lock(mutex_);
  ready_.wait(lock, [&] { return !queue_.empty() || num_finished_ == num_samples_; });
  if (queue_.empty()) return std::nullopt;
  SampleDelta d = std::move(queue_.front());
  queue_.pop_front();
  return d;
}

std::optional<SampleDelta> RequestHandle::next_for(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  if (!ready_.wait_for(lock, timeout, [&] { return !queue_.empty() || num_finished_ == num_samples_; })) {
    return std::nullopt;
  }
  if (queue_.empty()) return std::nullopt;
  SampleDelta d = std::move(queue_.front());
  queue_.pop_front();
  return d;
}

bool RequestHandle::done() const {
  std::lock_guard lock(mutex_);
  return queue_.empty() && num_finished_ == num_samples_;
}

}  // namespace tide

#include "sched/request.h"

#include <utility>

namespace tide {

Request::Request(RequestId request_id, RequestParams request_params)
    : id(request_id), params(std::move(request_params)), token_ids(params.prompt) {}

const char* to_string(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone: return "";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kError: return "error";
  }
  return "";
}

const char* to_string(RequestStatus status) {
  switch (status) {
    case RequestStatus::kWaiting: return "waiting";
    case RequestStatus::kRunning: return "running";
    case RequestStatus::kPreempted: return "preempted";
    case RequestStatus::kFinished: return "finished";
  }
  return "";
}

}  // namespace tide

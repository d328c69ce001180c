#include "server/api_error.h"

#include "chat/json_exact.h"

namespace tide::server {

ApiError::ApiError(int status, std::string message, std::string param, std::string type, std::string code)
    : std::runtime_error(std::move(message)),
      status_(status),
      type_(type.empty() ? error_type_for_status(status) : std::move(type)),
      param_(std::move(param)),
      code_(std::move(code)) {}

void bad_request(const std::string& param, const std::string& message) { throw ApiError(400, message, param); }

std::string error_type_for_status(int status) {
  switch (status) {
    case 400:
    case 413:
    case 422: return "invalid_request_error";
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 429: return "rate_limit_error";
    case 503: return "service_unavailable";
    default: return status >= 500 ? "internal_error" : "invalid_request_error";
  }
}

nlohmann::json error_json(const ApiError& error) {
  auto or_null = [](const std::string& s) { return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s); };
  return {{"error",
           {{"message", error.what()},
            {"type", error.type()},
            {"param", or_null(error.param())},
            {"code", error.code().empty() ? nlohmann::json(error.status()) : nlohmann::json(error.code())}}}};
}

// Big integers of a request (tools, documents) may come back in citations: printed as their digits.
std::string dump_json(const nlohmann::json& j) { return dump_json_exact(j); }

}  // namespace tide::server

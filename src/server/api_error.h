// ApiError: a request the server refuses, with the HTTP status and OpenAI's error fields. Thrown by the protocol
// parsers and the handlers; the HTTP layer turns it into {"error": {"message", "type", "param", "code"}}.
#pragma once

#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace tide::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string param = {}, std::string type = {}, std::string code = {});

  int status() const { return status_; }
  const std::string& type() const { return type_; }
  const std::string& param() const { return param_; }  // empty: null
  const std::string& code() const { return code_; }    // empty: null

 private:
  int status_;
  std::string type_;
  std::string param_;
  std::string code_;
};

// 400 invalid_request_error naming the offending parameter.
[[noreturn]] void bad_request(const std::string& param, const std::string& message);

// OpenAI's error body: {"error": {"message", "type", "param", "code"}}; param and code null when empty.
nlohmann::json error_json(const ApiError& error);
// The error type OpenAI uses for a status: 400 invalid_request_error, 401 authentication_error, 404
// not_found_error, 413 invalid_request_error, 503 service_unavailable, other 5xx internal_error.
std::string error_type_for_status(int status);

// `j` as compact JSON text; invalid UTF-8 in strings is replaced (U+FFFD), never an exception.
std::string dump_json(const nlohmann::json& j);

}  // namespace tide::server

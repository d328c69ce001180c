// The check both chat-template suites run on a folder's chat_cases.json (made with transformers'
// apply_chat_template): tide renders the same bytes and tokenizes them to the same ids, and the cases that
// expect an error raise exactly that message.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace tide::test {

// Checks every case with gtest assertions; returns how many expected an error.
inline int check_chat_cases(const ChatTemplate& chat, const Tokenizer& tokenizer, const nlohmann::json& cases) {
  int num_errors = 0;
  for (const auto& c : cases) {
    ChatTemplateInputs inputs;
    inputs.messages = c["messages"];
    inputs.add_generation_prompt = c.value("add_generation_prompt", true);
    SCOPED_TRACE(c["messages"].dump());
    if (c.contains("expect_error")) {
      ++num_errors;
      try {
        chat.render(inputs);
        ADD_FAILURE() << "expected an error";
      } catch (const Error& error) {
        EXPECT_EQ(std::string(error.what()), c["expect_error"].get<std::string>());
      }
      continue;
    }
    const std::string text = chat.render(inputs);
    EXPECT_EQ(text, c["text"].get<std::string>());
    EXPECT_EQ(tokenizer.encode(text, /*add_special_tokens=*/false), c["ids"].get<std::vector<int32_t>>());
  }
  return num_errors;
}

}  // namespace tide::test

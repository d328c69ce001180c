// The chat template and tokenizer of the tiny fixture model (tests/fixtures/cohere2-tiny, Cohere's formats), loaded
// once per fuzzing process: the targets that carry text through the server's path render and tokenize with them.
#pragma once

#include "chat/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace tide::fuzz {

struct TinyModel {
  ChatTemplate chat_template;
  Tokenizer tokenizer;
};

inline const TinyModel& tiny_model() {
  static const TinyModel model{*ChatTemplate::from_model_dir(TIDE_FIXTURES_DIR "/cohere2-tiny"),
                               Tokenizer::from_dir(TIDE_FIXTURES_DIR "/cohere2-tiny")};
  return model;
}

}  // namespace tide::fuzz

// tide tokenize / detokenize: the model folder's tokenizer alone (no weights are loaded).
#include <memory>

#include "apps/tide/cli_util.h"
#include "apps/tide/commands.h"
#include "tokenizer/tokenizer.h"

namespace tide::cli {

void add_tokenize_commands(CLI::App& app) {
  struct Args {
    std::string model, text, ids;
    bool no_special = false, skip_special = false;
  };
  auto args = std::make_shared<Args>();

  CLI::App* tok = app.add_subcommand("tokenize", "Print the token ids of a text as JSON {\"ids\": [...]}");
  tok->add_option("--model", args->model, "Model folder with tokenizer.json")->required()->check(CLI::ExistingDirectory);
  tok->add_option("--text", args->text, "Text to tokenize")->required();
  tok->add_flag("--no-special", args->no_special, "Do not add special tokens (BOS)");
  tok->callback([args] {
    const Tokenizer tokenizer = Tokenizer::from_dir(args->model);
    note_stand_in_tokenizer(tokenizer, args->model);
    print_json({{"ids", tokenizer.encode(args->text, !args->no_special)}});
  });

  CLI::App* detok = app.add_subcommand("detokenize", "Print the text of token ids as JSON {\"text\": \"...\"}");
  detok->add_option("--model", args->model, "Model folder with tokenizer.json")->required()->check(CLI::ExistingDirectory);
  detok->add_option("--ids", args->ids, "Token ids, comma-separated")
      ->required()
      ->check(not_empty("give token ids separated by commas, e.g. 5,17,42"));
  detok->add_flag("--skip-special", args->skip_special, "Leave special tokens out of the text");
  detok->callback([args] {
    const Tokenizer tokenizer = Tokenizer::from_dir(args->model);
    note_stand_in_tokenizer(tokenizer, args->model);
    print_json({{"text", tokenizer.decode(parse_ids(args->ids, "--ids"), args->skip_special)}});
  });
}

}  // namespace tide::cli

// The tide command-line program: generate, logits, tokenize, detokenize, serve, quantize, bench serve.
// Outside scripts parse its JSON output, so flag names and JSON keys are kept stable.
// Errors go to stderr with exit status 1 (2 for bad flags, from CLI11).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <string>

#include "apps/tide/commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"tide: an inference engine for Cohere2 models (sliding-window + global attention)", "tide"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "tide 0.1.0");
  tide::cli::add_generate_command(app);
  tide::cli::add_logits_command(app);
  tide::cli::add_tokenize_commands(app);
  tide::cli::add_serve_command(app);
  tide::cli::add_quantize_command(app);
  tide::cli::add_bench_command(app);
  // CLI11 reports an unknown command as "A subcommand is required"; name it instead.
  if (argc > 1 && argv[1][0] != '-') {
    std::string names;
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
      known = known || sub->get_name() == argv[1];
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    if (!known) {
      std::cerr << "tide: error: unknown command '" << argv[1] << "' (commands: " << names << ")\n";
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const tide::Error& e) {
    std::fflush(stdout);
    std::cerr << "tide: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::cerr << "tide: unexpected error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

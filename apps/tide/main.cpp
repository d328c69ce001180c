// The tide command-line program: generate, logits, tokenize, detokenize, serve, quantize, bench serve.
// Outside scripts parse its JSON output, so flag names and JSON keys are kept stable.
// Errors go to stderr: exit status 2 for usage errors (unknown commands and flags, missing or bad flag values),
// 1 for everything else (a model folder, a file or a request that cannot be used).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <string>

#include "apps/tide/cli_util.h"
#include "apps/tide/commands.h"
#include "core/error.h"

namespace {

// CLI11 writes a refused value as "--flag: MESSAGE"; the flag checks' messages (cli_util.h) begin with "must"
// or "is" and read as one sentence after the flag's name: "--block-size must be ...".
std::string usage_message(std::string message) {
  for (const char* verb : {": must ", ": is "}) {
    const size_t at = message.find(verb);
    if (at != std::string::npos && message.rfind("-", 0) == 0 && message.find(' ') > at) {
      return message.erase(at, 1);
    }
  }
  return message;
}

}  // namespace

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
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);  // --help, --version
    std::fflush(stdout);
    std::cerr << "tide: error: " << usage_message(e.what()) << "\nRun with --help for more information.\n";
    return 2;
  } catch (const tide::Error& e) {
    std::fflush(stdout);
    std::cerr << "tide: error: " << tide::cli::with_flag_names(e.what()) << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::cerr << "tide: unexpected error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

// fullband: the one command-line entry point (README.md, "Command line"). Each subcommand declares
// its flags (cli/commands.h), builds what it needs from a validated Config, runs, and exits
// non-zero with a one-line reason on bad input. `--help` lists only the subcommands that exist in
// this build.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/options.h"
#include "common/logging.h"

namespace fullband::cli {
namespace {

// In the order `fullband --help` lists them.
constexpr Command (*kCommands[])(CLI::App&) = {
    AddBackends, AddConfig,      AddModel,  AddTrain,  AddWorker, AddCkpt,   AddIngest, AddData,
    AddTokenize, AddCoordinator, AddSubmit, AddStatus, AddWatch,  AddCancel, AddPlot};

// "fullband ckpt export": the subcommands the command line reached, for error messages.
std::string CommandPath(const CLI::App& fullband) {
  std::string path = fullband.get_name();
  for (const CLI::App* app = &fullband; !app->get_subcommands().empty();) {
    app = app->get_subcommands().front();
    path += " " + app->get_name();
  }
  return path;
}

int Main(int argc, char** argv) {
  CLI::App fullband("fullband: pretrain latent-feedback transformers.", "fullband");
  // A flag given twice takes its last value; flags that collect every value say so.
  fullband.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  fullband.require_subcommand(1);
  // The subcommands hand the flags they do not have, such as --log-level, to fullband.
  fullband.fallthrough();
  LogLevel log_level = LogLevel::kInfo;
  std::vector<std::pair<std::string, int64_t>> levels;
  for (LogLevel level : kLogLevels) {
    levels.emplace_back(LogLevelName(level), static_cast<int>(level));
  }
  OneOf(fullband.add_option("--log-level", log_level, "the least severe messages logged"), levels)
      ->envname("FULLBAND_LOG_LEVEL")
      ->default_str(LogLevelName(log_level));
  std::vector<Command> commands;
  for (const auto add : kCommands) commands.push_back(add(fullband));
  // Set after the subcommands, which would inherit it.
  fullband.footer("`fullband COMMAND --help` describes a command.");
  if (argc < 2) {
    std::fputs(fullband.help().c_str(), stderr);
    return 2;
  }
  if (std::strcmp(argv[1], "help") == 0) {
    std::fputs(fullband.help().c_str(), stdout);
    return 0;
  }
  const auto given = [&](const Command& c) { return c.app->check_name(argv[1]); };
  if (argv[1][0] != '-' && std::none_of(commands.begin(), commands.end(), given)) {
    std::fprintf(stderr, "fullband: unknown command '%s' (fullband --help)\n", argv[1]);
    return 2;
  }
  try {
    fullband.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(fullband.help().c_str(), stdout);  // the help of the subcommand given
    return 0;
  } catch (const CLI::ParseError& e) {
    const std::string path = CommandPath(fullband);
    std::fprintf(stderr, "%s: %s (%s --help)\n", path.c_str(), e.what(), path.c_str());
    return 2;
  }
  SetLogThreshold(log_level);
  for (const Command& c : commands) {
    if (c.app->parsed()) return c.run();
  }
  return 2;  // unreachable: require_subcommand(1)
}

}  // namespace
}  // namespace fullband::cli

int main(int argc, char** argv) { return fullband::cli::Main(argc, argv); }

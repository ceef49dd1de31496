// The subcommands of the fullband binary (README.md, "Command line"). Each Add* function declares
// one subcommand on the `fullband` app: its positionals and flags with their types, defaults,
// checks and help, from which CLI11 parses the command line and writes `--help`. What it returns
// runs the command once the command line has parsed; the exit code is 0 for success, 1 when the
// work failed, 2 for bad usage or bad input.
#pragma once

#include <functional>

namespace CLI {
class App;
}  // namespace CLI

namespace fullband::cli {

struct Command {
  CLI::App* app;             // the subcommand; parsed() when it was given
  std::function<int()> run;  // does its work; returns the exit code
};

Command AddBackends(CLI::App& fullband);  // commands.cc
Command AddConfig(CLI::App& fullband);
Command AddModel(CLI::App& fullband);   // model_commands.cc
Command AddTrain(CLI::App& fullband);   // train_command.cc
Command AddWorker(CLI::App& fullband);  // worker_command.cc
Command AddCkpt(CLI::App& fullband);    // ckpt_command.cc
Command AddIngest(CLI::App& fullband);  // data_commands.cc
Command AddData(CLI::App& fullband);
Command AddTokenize(CLI::App& fullband);     // tokenize_command.cc
Command AddCoordinator(CLI::App& fullband);  // coordinator_commands.cc
Command AddSubmit(CLI::App& fullband);
Command AddStatus(CLI::App& fullband);
Command AddWatch(CLI::App& fullband);
Command AddCancel(CLI::App& fullband);
Command AddPlot(CLI::App& fullband);

}  // namespace fullband::cli

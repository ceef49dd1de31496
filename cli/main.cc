// fullband: the one command-line entry point (README.md, "Command line"). Each subcommand parses
// its flags, builds what it needs from a validated Config, runs, and exits non-zero with a one-line
// reason on bad input. `--help` lists only the subcommands that exist in this build.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli/commands.h"

namespace fullband::cli {
namespace {

struct Command {
  const char* name;
  const char* summary;
  int (*run)(const std::vector<std::string>& args);
};

const Command kCommands[] = {
    {"backends", "list the compute backends available here (CPU features, CUDA devices)",
     RunBackends},
    {"config", "check a configuration file: `fullband config check FILE [--json]`", RunConfig},
    {"model", "initialize weights, or run one K-pass step and write its gradients (init|grad)",
     RunModel},
    {"train",
     "train on a token file or stores, alone or under mpirun: `fullband train CONFIG.yaml`",
     RunTrain},
    {"worker", "one rank of a coordinated job's worker group (started by the coordinator)",
     RunWorker},
    {"ckpt", "list, verify or export checkpoints: `fullband ckpt ls|verify|export PATH`", RunCkpt},
    {"ingest", "tokenize text / JSONL / directories into a token store (--input, --out, --seq-len)",
     RunIngest},
    {"data", "inspect or check a token store: `fullband data info|verify STORE`", RunData},
    {"tokenize", "print the Phi-4 token ids of stdin or a file (--json, --decode)", RunTokenize},
    {"coordinator", "run the coordinator: `fullband coordinator --config coordinator.yaml`",
     RunCoordinator},
    {"submit", "submit a job: `fullband submit JOB.yaml [--wait]` prints its id", RunSubmit},
    {"status", "show jobs: `fullband status [JOB] [--all] [--json]`, `status JOB --history`",
     RunStatus},
    {"watch", "follow a job's budget, throughput and losses: `fullband watch JOB`", RunWatch},
    {"cancel", "cancel a job: `fullband cancel JOB`", RunCancel},
    {"plot", "plot a job's loss per pass: `fullband plot JOB --out FILE.png`", RunPlot},
};

void PrintHelp() {
  std::printf(
      "fullband: pretrain latent-feedback transformers.\n\n"
      "usage: fullband <command> [args]   (fullband <command> --help for details)\n\n"
      "commands:\n");
  for (const Command& c : kCommands) std::printf("  %-10s %s\n", c.name, c.summary);
}

}  // namespace
}  // namespace fullband::cli

int main(int argc, char** argv) {
  using fullband::cli::kCommands;
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0 ||
      std::strcmp(argv[1], "help") == 0) {
    fullband::cli::PrintHelp();
    return argc < 2 ? 2 : 0;
  }
  for (const auto& c : kCommands) {
    if (std::strcmp(argv[1], c.name) == 0) {
      return c.run(std::vector<std::string>(argv + 2, argv + argc));
    }
  }
  std::fprintf(stderr, "fullband: unknown command '%s' (see fullband --help)\n", argv[1]);
  return 2;
}

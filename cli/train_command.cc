// `fullband train CONFIG.yaml`: training with the local step plan (worker/trainer.h), single
// process or as an mpirun group laid out by `parallel`; rank 0 logs one line per
// `runtime.log_every` steps (and the last), or one JSON object per logged step with --json.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "cli/backend_client_options.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "cli/step_log.h"
#include "comm/mpi_communicator.h"
#include "common/config.h"
#include "worker/trainer.h"

namespace fullband::cli {
namespace {

struct TrainArgs {
  std::string config;
  std::optional<int64_t> steps;  // else schedule.steps
  std::string resume;
  bool json = false;
  ops::BackendOptions backend;  // device and threads: the config's runtime
};

int Train(const TrainArgs& args) {
  StatusOr<Config> config = LoadConfigFile(args.config);
  if (!config.ok()) {
    std::fprintf(stderr, "fullband train: %s\n", config.status().message().c_str());
    return 2;
  }
  if (args.steps) config->schedule.steps = *args.steps;
  StatusOr<comm::ProcessGroup> group = comm::JoinProcessGroup();
  if (!group.ok()) {
    std::fprintf(stderr, "fullband train: %s\n", group.status().ToString().c_str());
    return 1;
  }
  const bool leader = group->world->rank() == 0;
  const int64_t every = config->runtime.log_every;
  StatusOr<worker::TrainSummary> summary = worker::TrainLocal(
      *config, group->world.get(),
      [&](const worker::StepRecord& r) {
        if (leader && LogThisStep(r, every)) PrintStepRecord(r, args.json);
      },
      args.resume, args.backend);
  if (!summary.ok()) {
    std::fprintf(stderr, "fullband train: %s\n", summary.status().ToString().c_str());
    if (group->mpi != nullptr) comm::MpiSession::Abort(1);  // the other ranks may be waiting
    return summary.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  if (leader) PrintSummary(*summary, args.json);
  return 0;
}

}  // namespace

Command AddTrain(CLI::App& fullband) {
  CLI::App* app = fullband.add_subcommand(
      "train",
      "train on a token file or stores, alone or under mpirun: `fullband train CONFIG.yaml`");
  app->footer(
      "Trains on data.path (little-endian uint32 token ids) or the token stores of data.sources\n"
      "(written by `fullband ingest`) for schedule.steps steps (or --steps) or the budget's,\n"
      "alone or under `mpirun -np TP×DP` with the layout of `parallel`, each step's pass count\n"
      "drawn from schedule.phases. Logs per step: passes, loss per pass, gradient norm, learning\n"
      "rate, tokens, token-equivalents, tokens/s and MFU. Saves checkpoints under checkpoint.dir\n"
      "(none when it is \"\") every checkpoint.every_steps steps and at the end.");
  auto args = std::make_shared<TrainArgs>();
  app->add_option("CONFIG.yaml", args->config, "the run's configuration (docs/TRAINING.md)")
      ->required();
  app->add_option("--steps", args->steps, "steps to run instead of schedule.steps")
      ->type_name("N")
      ->transform(IntIn(1));
  app->add_option("--resume", args->resume,
                  "continue from a checkpoint (a step-<N> directory, or a checkpoint.dir whose "
                  "newest complete one is taken), written at any layout, exactly as the "
                  "uninterrupted run would have gone on")
      ->type_name("DIR");
  app->add_flag("--json", args->json, "one JSON object per logged step and one for the summary");
  AddBackendOptions(*app, &args->backend);
  return {app, [args] { return Train(*args); }};
}

}  // namespace fullband::cli

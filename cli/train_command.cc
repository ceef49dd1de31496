// `fullband train CONFIG.yaml`: training with the local step plan (worker/trainer.h), single
// process or as an mpirun group laid out by `parallel`; rank 0 logs one line per
// `runtime.log_every` steps (and the last), or one JSON object per logged step with --json.
#include <cstdio>

#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/step_log.h"
#include "common/config.h"
#include "worker/mpi_communicator.h"
#include "worker/trainer.h"

namespace fullband::cli {
namespace {

constexpr char kTrainUsage[] =
    "usage: fullband train CONFIG.yaml [--steps N] [--resume DIR] [--json]\n"
    "  Trains on data.path (little-endian uint32 token ids) or the token stores of data.sources\n"
    "  (written by `fullband ingest`) for schedule.steps steps (or N) or the budget's,\n"
    "  alone or under `mpirun -np TP×DP` with the layout of `parallel`,\n"
    "  each step's pass count drawn from schedule.phases. Logs per step: passes, loss per\n"
    "  pass, gradient norm, learning rate, tokens, token-equivalents, tokens/s and MFU.\n"
    "  Saves checkpoints under checkpoint.dir (none when it is \"\") every\n"
    "  checkpoint.every_steps steps and at the end. --resume DIR continues from a checkpoint\n"
    "  (a step-<N> directory, or a checkpoint.dir whose newest complete one is taken), written\n"
    "  at any layout, exactly as the uninterrupted run would have gone on.\n";

}  // namespace

int RunTrain(const std::vector<std::string>& args) {
  StatusOr<Flags> flags = Flags::Parse(args, {"steps", "resume"}, {"json", "help"});
  if (!flags.ok() || flags->Has("help") || flags->positional().size() != 1) {
    return Usage(kTrainUsage, flags, "train");
  }
  StatusOr<Config> config = LoadConfigFile(flags->positional()[0]);
  if (!config.ok()) {
    std::fprintf(stderr, "fullband train: %s\n", config.status().message().c_str());
    return 2;
  }
  StatusOr<int64_t> steps = flags->GetInt("steps", config->schedule.steps);
  if (!steps.ok() || *steps < 1) {
    std::fprintf(stderr, "fullband train: --steps must be a positive integer\n");
    return 2;
  }
  config->schedule.steps = *steps;
  const bool json = flags->Has("json");
  StatusOr<worker::ProcessGroup> group = worker::JoinProcessGroup();
  if (!group.ok()) {
    std::fprintf(stderr, "fullband train: %s\n", group.status().ToString().c_str());
    return 1;
  }
  const bool leader = group->world->rank() == 0;
  const int64_t every = config->runtime.log_every;
  StatusOr<worker::TrainSummary> summary = worker::TrainLocal(
      *config, group->world.get(),
      [&](const worker::StepRecord& r) {
        if (leader && LogThisStep(r, every)) PrintStepRecord(r, json);
      },
      flags->Get("resume", ""));
  if (!summary.ok()) {
    std::fprintf(stderr, "fullband train: %s\n", summary.status().ToString().c_str());
    if (group->mpi != nullptr) worker::MpiSession::Abort(1);  // the other ranks may be waiting
    return summary.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  if (leader) PrintSummary(*summary, json);
  return 0;
}

}  // namespace fullband::cli

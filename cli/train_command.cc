// `fullband train CONFIG.yaml`: single-process training (worker/trainer.h), one log line per
// `runtime.log_every` steps (and the last), or one JSON object per logged step with --json.
#include <cstdio>

#include "cli/commands.h"
#include "cli/flags.h"
#include "common/config.h"
#include "worker/trainer.h"

namespace fullband::cli {
namespace {

constexpr char kTrainUsage[] =
    "usage: fullband train CONFIG.yaml [--steps N] [--json]\n"
    "  Trains on data.path (little-endian uint32 token ids) or the token stores of data.sources\n"
    "  (written by `fullband ingest`) for schedule.steps steps (or N),\n"
    "  each step's pass count drawn from schedule.phases. Logs per step: passes, loss per\n"
    "  pass, gradient norm, learning rate, tokens, token-equivalents, tokens/s and MFU.\n";

void PrintRecord(const worker::StepRecord& r, int64_t steps, bool json) {
  if (json) {
    std::printf("{\"step\": %ld, \"passes\": %ld, \"loss\": %.6f, \"pass_loss\": [", r.step + 1,
                r.passes, r.total_loss);
    for (size_t k = 0; k < r.pass_loss.size(); ++k) {
      std::printf("%s%.6f", k ? ", " : "", r.pass_loss[k]);
    }
    std::printf(
        "], \"grad_norm\": %.4f, \"lr\": %.3e, \"tokens\": %ld, \"token_equivalents\": %ld, "
        "\"step_s\": %.4f, \"tokens_per_s\": %.1f, \"mfu\": %.4f}\n",
        r.grad_norm, r.lr, r.tokens, r.token_equivalents, r.step_seconds, r.tokens_per_s, r.mfu);
  } else {
    std::printf("step %5ld/%ld  K=%ld  loss %.4f [", r.step + 1, steps, r.passes, r.total_loss);
    for (size_t k = 0; k < r.pass_loss.size(); ++k) {
      std::printf("%s%.4f", k ? " " : "", r.pass_loss[k]);
    }
    std::printf("]  gnorm %.3f  lr %.2e  tokens %ld  tok-eq %ld  %.0f tok/s  MFU %.1f%%\n",
                r.grad_norm, r.lr, r.tokens, r.token_equivalents, r.tokens_per_s, 100 * r.mfu);
  }
  std::fflush(stdout);
}

}  // namespace

int RunTrain(const std::vector<std::string>& args) {
  StatusOr<Flags> flags = Flags::Parse(args, {"steps"}, {"json", "help"});
  if (!flags.ok() || flags->Has("help") || flags->positional().size() != 1) {
    if (!flags.ok()) std::fprintf(stderr, "fullband train: %s\n", flags.status().message().c_str());
    std::fputs(kTrainUsage, flags.ok() && flags->Has("help") ? stdout : stderr);
    return flags.ok() && flags->Has("help") ? 0 : 2;
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
  const int64_t every = config->runtime.log_every, total = config->schedule.steps;
  StatusOr<worker::TrainSummary> summary = worker::Train(*config, [&](const worker::StepRecord& r) {
    if ((r.step + 1) % every == 0 || r.step == 0 || r.step + 1 == total) {
      PrintRecord(r, total, json);
    }
  });
  if (!summary.ok()) {
    std::fprintf(stderr, "fullband train: %s\n", summary.status().ToString().c_str());
    return summary.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  const worker::TrainSummary& s = *summary;
  if (json) {
    std::printf(
        "{\"summary\": true, \"steps\": %ld, \"tokens\": %ld, \"token_equivalents\": %ld, "
        "\"seconds\": %.2f, \"tokens_per_s\": %.1f, \"peak_gflops\": %.1f}\n",
        s.steps, s.tokens, s.token_equivalents, s.seconds, s.tokens / s.seconds, s.peak_gflops);
  } else {
    std::printf("done: %ld steps, %ld tokens, %ld token-equivalents in %.1f s (%.0f tok/s)\n",
                s.steps, s.tokens, s.token_equivalents, s.seconds, s.tokens / s.seconds);
    for (size_t k = 0; k < s.first_pass_loss.size(); ++k) {
      std::printf("  pass %zu loss: %.4f -> %.4f\n", k + 1, s.first_pass_loss[k],
                  s.last_pass_loss[k]);
    }
  }
  return 0;
}

}  // namespace fullband::cli

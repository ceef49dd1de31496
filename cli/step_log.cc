#include "cli/step_log.h"

#include <cstdio>

namespace fullband::cli {

void PrintStepRecord(const worker::StepRecord& r, bool json) {
  if (json) {
    std::printf("{\"step\": %ld, \"passes\": %ld, \"loss\": %.6f, \"pass_loss\": [", r.step + 1,
                r.passes, r.total_loss);
    for (size_t k = 0; k < r.pass_loss.size(); ++k) {
      std::printf("%s%.6f", k ? ", " : "", r.pass_loss[k]);
    }
    std::printf(
        "], \"grad_norm\": %.4f, \"lr\": %.3e, \"tokens\": %ld, \"token_equivalents\": %ld, "
        "\"step_s\": %.4f, \"tokens_per_s\": %.1f, \"mfu\": %.4f, \"comm_exposed_s\": %.4f, "
        "\"comm_hidden\": %.3f}\n",
        r.grad_norm, r.lr, r.tokens, r.token_equivalents, r.step_seconds, r.tokens_per_s, r.mfu,
        r.comm_exposed_seconds, r.comm_hidden_fraction);
  } else {
    std::printf("step %5ld/%ld  K=%ld  loss %.4f [", r.step + 1, r.total_steps, r.passes,
                r.total_loss);
    for (size_t k = 0; k < r.pass_loss.size(); ++k) {
      std::printf("%s%.4f", k ? " " : "", r.pass_loss[k]);
    }
    std::printf("]  gnorm %.3f  lr %.2e  tokens %ld  tok-eq %ld  %.0f tok/s  MFU %.1f%%\n",
                r.grad_norm, r.lr, r.tokens, r.token_equivalents, r.tokens_per_s, 100 * r.mfu);
  }
  std::fflush(stdout);
}

bool LogThisStep(const worker::StepRecord& r, int64_t every) {
  return (r.step + 1) % every == 0 || r.step == 0 || r.step + 1 == r.total_steps;
}

void PrintSummary(const worker::TrainSummary& s, bool json) {
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
  std::fflush(stdout);
}

}  // namespace fullband::cli

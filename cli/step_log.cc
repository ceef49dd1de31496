#include "cli/step_log.h"

#include <cstdio>

#include "cli/json_line.h"

namespace fullband::cli {

void PrintStepRecord(const worker::StepRecord& r, bool json) {
  if (json) {
    PrintJsonLine(OrderedJson{{"step", r.step + 1},
                              {"passes", r.passes},
                              {"loss", r.total_loss},
                              {"pass_loss", r.pass_loss},
                              {"grad_norm", r.grad_norm},
                              {"lr", r.lr},
                              {"tokens", r.tokens},
                              {"token_equivalents", r.token_equivalents},
                              {"step_s", r.step_seconds},
                              {"tokens_per_s", r.tokens_per_s},
                              {"mfu", r.mfu},
                              {"comm_exposed_s", r.comm_exposed_seconds},
                              {"comm_hidden", r.comm_hidden_fraction}});
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
    PrintJsonLine(OrderedJson{{"summary", true},
                              {"steps", s.steps},
                              {"tokens", s.tokens},
                              {"token_equivalents", s.token_equivalents},
                              {"seconds", s.seconds},
                              {"tokens_per_s", s.tokens / s.seconds},
                              {"peak_gflops", s.peak_gflops}});
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

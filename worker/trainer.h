// Trainer: the single-process training loop — schedule → batch → K-pass step → clip → AdamW —
// with per-step accounting of tokens, token-equivalents (tokens × passes), throughput and MFU.
//
// Each step draws its pass count from the schedule (common/schedule.h), its batch from the
// token file at cursor step·B or from the blended token stores (dataloader/reader.h), and its
// jitter/mixin draws from (schedule seed, step), so step s of a run is the same whatever ran before
// it.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "common/config.h"
#include "common/status.h"
#include "ops/backend.h"

namespace fullband::worker {

struct StepRecord {
  int64_t step = 0;  // 0-based
  int64_t passes = 1;
  std::vector<double> pass_loss;
  double total_loss = 0;
  double grad_norm = 0;
  double lr = 0;
  int64_t tokens = 0;             // cumulative input tokens
  int64_t token_equivalents = 0;  // cumulative tokens × passes
  double step_seconds = 0;
  double tokens_per_s = 0;  // this step's tokens / its wall time
  double model_flops = 0;   // this step's model FLOPs
  double mfu = 0;           // model FLOPs / time / peak
};

struct TrainSummary {
  int64_t steps = 0;
  int64_t tokens = 0;
  int64_t token_equivalents = 0;
  double seconds = 0;
  double peak_gflops = 0;
  std::vector<double> first_pass_loss;  // per pass count k (index k-1): first logged loss
  std::vector<double> last_pass_loss;   // ... and the last
};

// The backend's sgemm rate at 2048³ in GFLOP/s (best of 3 after a warmup): the MFU peak.
double MeasurePeakGflops(ops::Backend& backend);

// Runs config.schedule.steps steps (the config must be valid and name data.path or
// data.sources).
// `on_step` (optional) sees every step's record. Errors: those of the token file or stores
// (a corrupt record is DATA_LOSS naming it), the weights file, and the backend.
StatusOr<TrainSummary> Train(const Config& config,
                             const std::function<void(const StepRecord&)>& on_step);

}  // namespace fullband::worker

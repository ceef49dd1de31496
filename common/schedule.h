// The pass schedule and the compute accounting shared by the trainer and the coordinator.
//
// PassesForStep draws the pass count of a step from the phase that holds the step's budget
// fraction, with a generator seeded by (schedule seed, step) alone: the same step always gets
// the same pass count, whichever process asks and however often (restarts, re-leases).
// ModelFlopsPerToken counts DESIGN §1's model FLOPs: 6·N per token per pass, plus attention.
#pragma once

#include <cstdint>

#include "common/config.h"

namespace fullband {

// Pass count of step `step` (0-based) in a budget of `schedule.steps` steps.
int64_t PassesForStep(const ScheduleConfig& schedule, int64_t step);

// Training FLOPs (forward + backward) per token per pass for sequences of `seq_len`:
// 6·N (N = all parameters) + 12·L·H·Dh·(mean visible keys per query of each layer).
double ModelFlopsPerToken(const ModelConfig& model, int64_t num_params, int64_t seq_len);

}  // namespace fullband

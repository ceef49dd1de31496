// The pass schedule and the compute accounting shared by the trainer and the coordinator.
//
// PassesAtFraction draws the pass count of a step from the phase that holds the step's budget
// fraction (common/step_plan.h says where each step sits), with a generator seeded by (schedule
// seed, step) alone: the same step always gets the same pass count, whichever process asks and
// however often (restarts, re-leases). ModelFlopsPerToken counts the model FLOPs of
// docs/TRAINING.md: 6·N per token per pass, plus attention.
#pragma once

#include <cstdint>

#include "common/config.h"

namespace fullband {

// Pass count of step `step` whose budget fraction is `fraction` (in [0, 1]): the phase is the
// first whose `until` exceeds `fraction` (the last phase at or past 1), the draw comes from a
// generator seeded by (schedule.seed, step) alone. StepPlan maps steps to fractions of a
// token, token-equivalent or FLOP budget (common/step_plan.h).
int64_t PassesAtFraction(const ScheduleConfig& schedule, double fraction, int64_t step);

// Training FLOPs (forward + backward) per token per pass for sequences of `seq_len`:
// 6·N (N = all parameters: ModelParameterCount, common/model_params.h) + 12·L·H·Dh·(mean
// visible keys per query of each layer).
double ModelFlopsPerToken(const ModelConfig& model, int64_t num_params, int64_t seq_len);

}  // namespace fullband

// The per-step log line of `fullband train` and `fullband worker` (one format for both), and
// their closing summary.
#pragma once

#include <cstdint>

#include "worker/trainer.h"

namespace fullband::cli {

// One line for step r: text, or one JSON object.
void PrintStepRecord(const worker::StepRecord& r, bool json);
// Whether step r is logged: every `every`-th, the first and the last of the run.
bool LogThisStep(const worker::StepRecord& r, int64_t every);
// "done: ..." and the first → last loss of each pass count (or the JSON summary object).
void PrintSummary(const worker::TrainSummary& s, bool json);

}  // namespace fullband::cli

#include "worker/step_source.h"

namespace fullband::worker {

StatusOr<std::optional<StepAssignment>> LocalStepSource::Next() {
  if (next_ >= plan_.total_steps()) return std::optional<StepAssignment>();
  return std::optional<StepAssignment>(plan_.Assign(next_++));
}

}  // namespace fullband::worker

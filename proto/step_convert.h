// The one conversion between a step of the plan (common/step_plan.h) and its wire form
// (proto::StepAssignment of proto/coordinator.proto), used by the coordinator's leases and the
// worker's step source.
#pragma once

#include "common/step_plan.h"
#include "proto/coordinator.pb.h"

namespace fullband {

proto::StepAssignment ToProto(const StepAssignment& step);
StepAssignment FromProto(const proto::StepAssignment& message);

}  // namespace fullband

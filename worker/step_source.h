// StepSource: where a training run's steps come from. Every rank of a worker group calls Next
// and Done in the same order; what a step is — its pass count, sampler cursor and seed — is
// always StepPlan's (common/step_plan.h), whether it was planned here or leased.
//
// - LocalStepSource: the plan of the run's own Config (`fullband train`, no coordinator).
// - CoordinatorStepSource (cli/coordinator_step_source.h): the coordinator's leases, for
//   `fullband worker`; it lives with that command, so that the trainer links no gRPC.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "common/status.h"
#include "common/step_plan.h"

namespace fullband::worker {

class StepSource {
 public:
  virtual ~StepSource() = default;
  // The next step, or nullopt when the run is over (see stop_reason()).
  virtual StatusOr<std::optional<StepAssignment>> Next() = 0;
  // Step `step` ran on every rank: its global per-pass losses and wall time.
  virtual Status Done(const StepAssignment& step, const std::vector<double>& pass_loss,
                      double seconds) = 0;
  // The checkpoint at `path` holds the state after steps [0, step) in `shards` files (rank 0
  // calls it once the checkpoint is committed on disk; the coordinator then restarts from it).
  virtual Status Commit(int64_t step, const std::string& path, int64_t shards) = 0;
  // The number of steps of the whole run or job (for the learning-rate schedule).
  virtual int64_t total_steps() const = 0;
  // After Next returned nullopt: "" when every step of the budget ran, else why the run
  // stopped early ("job is CANCELLED").
  const std::string& stop_reason() const { return stop_reason_; }

 protected:
  std::string stop_reason_;
};

class LocalStepSource final : public StepSource {
 public:
  // Steps [first_step, plan.total_steps()) of `plan`.
  LocalStepSource(StepPlan plan, int64_t first_step) : plan_(std::move(plan)), next_(first_step) {}

  StatusOr<std::optional<StepAssignment>> Next() override;
  Status Done(const StepAssignment&, const std::vector<double>&, double) override {
    return OkStatus();
  }
  Status Commit(int64_t, const std::string&, int64_t) override { return OkStatus(); }
  int64_t total_steps() const override { return plan_.total_steps(); }

 private:
  StepPlan plan_;
  int64_t next_;
};

}  // namespace fullband::worker

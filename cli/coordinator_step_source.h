// CoordinatorStepSource: the steps of a coordinated job (worker/step_source.h's interface).
// Rank 0 leases steps from the coordinator (coordinator/client.h) and broadcasts each to the
// group; rank 0 reports every finished step and every committed checkpoint. The group stops
// when the budget is spent or the coordinator says the job is over or restarting. It is the
// adapter between the trainer and the coordinator's client, so it lives above both, with the
// `fullband worker` command that uses it (docs/DESIGN.md §3).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "common/status.h"
#include "common/step_plan.h"
#include "coordinator/client.h"
#include "worker/step_source.h"

namespace fullband::cli {

class CoordinatorStepSource final : public worker::StepSource {
 public:
  // `client` is rank 0's registered client (null on the other ranks); `comm` is the whole
  // group. `total_steps` comes from the registration, broadcast by rank 0.
  // `lease_timeout` bounds how long the other ranks wait for rank 0's next step (it includes
  // rank 0's retries of the coordinator).
  CoordinatorStepSource(coordinator::WorkerClient* client, comm::Communicator* comm,
                        int64_t total_steps, std::chrono::milliseconds lease_timeout)
      : client_(client), comm_(comm), total_(total_steps), lease_timeout_(lease_timeout) {}

  // Errors: rank 0's lease errors, on every rank (their text broadcast); the communicator's.
  StatusOr<std::optional<StepAssignment>> Next() override;
  // Rank 0 reports the step (durable when OK); the other ranks do nothing.
  Status Done(const StepAssignment& step, const std::vector<double>& pass_loss,
              double seconds) override;
  // Rank 0 calls CommitCheckpoint; the other ranks do nothing.
  Status Commit(int64_t step, const std::string& path, int64_t shards) override;
  int64_t total_steps() const override { return total_; }

 private:
  coordinator::WorkerClient* client_;
  comm::Communicator* comm_;
  int64_t total_;
  std::chrono::milliseconds lease_timeout_;
  bool completed_ = false;  // a report said the budget is spent
};

}  // namespace fullband::cli

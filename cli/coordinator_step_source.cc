#include "cli/coordinator_step_source.h"

#include <algorithm>

#include "proto/step_convert.h"

namespace fullband::cli {

namespace {

// What rank 0 broadcasts before every step (BroadcastResult): kStep and the serialized
// proto::StepAssignment, or kEnd and why the run ends ("" when the budget is spent), or the
// error that rank 0 met.
constexpr char kStep = 'S', kEnd = 'E';

// Rank 0's message for the next step.
StatusOr<std::string> NextMessage(coordinator::WorkerClient& client, bool completed) {
  if (completed) return std::string(1, kEnd);
  if (client.should_stop()) return kEnd + client.stop_reason();
  StatusOr<std::optional<proto::StepAssignment>> next = client.NextStep();
  if (!next.ok()) return Status(next.status().code(), "lease: " + next.status().message());
  if (!next->has_value()) return std::string(1, kEnd);
  return kStep + (*next)->SerializeAsString();
}

}  // namespace

StatusOr<std::optional<StepAssignment>> CoordinatorStepSource::Next() {
  StatusOr<std::string> mine =
      comm_->rank() == 0 ? NextMessage(*client_, completed_) : StatusOr<std::string>("");
  const StatusOr<std::string> got = comm::BroadcastResult(*comm_, 0, mine, lease_timeout_);
  if (!got.ok()) return got.status();
  const std::string& m = *got;
  if (!m.starts_with(kStep)) {  // kEnd and the reason
    stop_reason_ = m.substr(std::min<size_t>(1, m.size()));
    return std::optional<StepAssignment>();
  }
  proto::StepAssignment a;
  if (!a.ParseFromString(m.substr(1))) return InternalError("step broadcast: unparsable");
  return std::optional<StepAssignment>(FromProto(a));
}

Status CoordinatorStepSource::Done(const StepAssignment& step, const std::vector<double>& pass_loss,
                                   double seconds) {
  if (comm_->rank() != 0) return OkStatus();
  FB_ASSIGN_OR_RETURN(proto::ReportStepResponse r,
                      client_->Report(ToProto(step), pass_loss, seconds));
  if (r.job_completed()) completed_ = true;
  return OkStatus();
}

Status CoordinatorStepSource::Commit(int64_t step, const std::string& path, int64_t shards) {
  if (comm_->rank() != 0) return OkStatus();
  return client_->Commit(step, path, shards);
}

}  // namespace fullband::cli

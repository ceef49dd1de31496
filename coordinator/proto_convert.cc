#include "coordinator/proto_convert.h"

#include "common/check.h"
#include "proto/config_convert.h"
#include "proto/reflect_fields.h"

namespace fullband::coordinator {

proto::JobState ToProto(JobState state) {
  switch (state) {
    case JobState::kPending:
      return proto::JOB_STATE_PENDING;
    case JobState::kLaunching:
      return proto::JOB_STATE_LAUNCHING;
    case JobState::kRunning:
      return proto::JOB_STATE_RUNNING;
    case JobState::kRestarting:
      return proto::JOB_STATE_RESTARTING;
    case JobState::kCompleted:
      return proto::JOB_STATE_COMPLETED;
    case JobState::kFailed:
      return proto::JOB_STATE_FAILED;
    case JobState::kCancelled:
      return proto::JOB_STATE_CANCELLED;
  }
  return proto::JOB_STATE_UNSPECIFIED;
}

StatusOr<JobState> FromProto(proto::JobState state) {
  switch (state) {
    case proto::JOB_STATE_PENDING:
      return JobState::kPending;
    case proto::JOB_STATE_LAUNCHING:
      return JobState::kLaunching;
    case proto::JOB_STATE_RUNNING:
      return JobState::kRunning;
    case proto::JOB_STATE_RESTARTING:
      return JobState::kRestarting;
    case proto::JOB_STATE_COMPLETED:
      return JobState::kCompleted;
    case proto::JOB_STATE_FAILED:
      return JobState::kFailed;
    case proto::JOB_STATE_CANCELLED:
      return JobState::kCancelled;
    default:
      return InvalidArgumentError("job state " + std::to_string(static_cast<int>(state)) +
                                  " is not a known state");
  }
}

void ToProto(const Ledger& ledger, proto::Ledger* out) { StructToProto(ledger, out); }

Ledger FromProto(const proto::Ledger& message) {
  Ledger ledger;
  const Status read = ProtoToStruct(message, ledger);
  FB_CHECK(read.ok()) << read.ToString();  // no enums, no required entries: cannot fail
  return ledger;
}

void ToProto(const JobInfo& job, proto::Job* out) {
  out->set_id(job.id);
  out->mutable_spec()->set_name(job.spec.name);
  out->mutable_spec()->set_owner(job.spec.owner);
  *out->mutable_spec()->mutable_config() = fullband::ToProto(job.spec.config);
  out->set_state(ToProto(job.state));
  out->set_reason(job.reason);
  out->set_attempt(job.attempt);
  out->set_restarts(job.restarts);
  ToProto(job.ledger, out->mutable_ledger());
  out->set_total_steps(job.total_steps);
  out->set_budget_amount(job.budget_amount);
  out->set_budget_spent(job.budget_spent);
  out->set_committed_step(job.committed_step);
  out->set_checkpoint_path(job.checkpoint_path);
  out->set_leased_until(job.leased_until);
  out->set_created_unix(job.created_unix);
  out->set_updated_unix(job.updated_unix);
  out->set_tokens_per_second(job.tokens_per_second);
}

}  // namespace fullband::coordinator

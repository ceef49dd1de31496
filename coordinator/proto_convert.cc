#include "coordinator/proto_convert.h"

#include "proto/config_convert.h"

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

void ToProto(const Ledger& l, proto::Ledger* out) {
  out->set_steps(l.steps);
  out->set_tokens(l.tokens);
  out->set_token_equivalents(l.token_equivalents);
  out->set_flops(l.flops);
  for (const auto& [passes, n] : l.pass_histogram) (*out->mutable_pass_histogram())[passes] = n;
  out->set_wall_seconds(l.wall_seconds);
  out->set_step_seconds(l.step_seconds);
  out->set_wasted_steps(l.wasted_steps);
  out->set_wasted_tokens(l.wasted_tokens);
  out->set_wasted_token_equivalents(l.wasted_token_equivalents);
  out->set_wasted_flops(l.wasted_flops);
  for (double loss : l.last_losses) out->add_last_losses(loss);
}

Ledger FromProto(const proto::Ledger& p) {
  Ledger l;
  l.steps = p.steps();
  l.tokens = p.tokens();
  l.token_equivalents = p.token_equivalents();
  l.flops = p.flops();
  for (const auto& [passes, n] : p.pass_histogram()) l.pass_histogram[passes] = n;
  l.wall_seconds = p.wall_seconds();
  l.step_seconds = p.step_seconds();
  l.wasted_steps = p.wasted_steps();
  l.wasted_tokens = p.wasted_tokens();
  l.wasted_token_equivalents = p.wasted_token_equivalents();
  l.wasted_flops = p.wasted_flops();
  l.last_losses.assign(p.last_losses().begin(), p.last_losses().end());
  return l;
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

#include "coordinator/rpc_handler.h"

#include <cmath>

#include "coordinator/proto_convert.h"
#include "proto/config_convert.h"
#include "proto/step_convert.h"

namespace fullband::coordinator {
namespace {

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

// 1..max bytes of [A-Za-z0-9._-].
Status CheckName(const char* field, const std::string& value, size_t max) {
  if (value.empty()) return InvalidArgumentError(std::string(field) + ": empty");
  if (value.size() > max) {
    return InvalidArgumentError(std::string(field) + ": longer than " + std::to_string(max) +
                                " bytes");
  }
  for (char c : value) {
    if (!IsNameChar(c)) {
      return InvalidArgumentError(std::string(field) + ": only [A-Za-z0-9._-] are allowed");
    }
  }
  return OkStatus();
}

Status CheckLength(const char* field, const std::string& value, size_t min, size_t max) {
  if (value.size() < min || value.size() > max) {
    return InvalidArgumentError(std::string(field) + ": " + std::to_string(value.size()) +
                                " bytes, expected " + std::to_string(min) + ".." +
                                std::to_string(max));
  }
  return OkStatus();
}

Status CheckIncarnation(uint64_t incarnation) {
  if (incarnation == 0) return InvalidArgumentError("incarnation: must be non-zero");
  return OkStatus();
}

}  // namespace

RpcHandler::RpcHandler(Coordinator* coordinator, const Authenticator* auth)
    : coordinator_(coordinator), auth_(auth) {}

StatusOr<Principal> RpcHandler::Authenticate(std::string_view authorization) const {
  if (auth_ == nullptr) return Principal{Role::kAdmin, "local", ""};
  return auth_->Authenticate(authorization);
}

StatusOr<Principal> RpcHandler::JobCaller(std::string_view authorization,
                                          const std::string& job_id) const {
  FB_ASSIGN_OR_RETURN(Principal p, Authenticate(authorization));
  FB_RETURN_IF_ERROR(CheckJobService(p));
  FB_RETURN_IF_ERROR(CheckName("job_id", job_id, kMaxIdBytes));
  FB_ASSIGN_OR_RETURN(JobInfo job, coordinator_->GetJob(job_id));
  FB_RETURN_IF_ERROR(CheckJobOwner(p, job.spec.owner));
  return p;
}

Status RpcHandler::WorkerCaller(std::string_view authorization, const std::string& job_id) const {
  FB_ASSIGN_OR_RETURN(Principal p, Authenticate(authorization));
  if (auth_ != nullptr) FB_RETURN_IF_ERROR(CheckWorkerService(p, job_id));
  return CheckName("job_id", job_id, kMaxIdBytes);
}

Status RpcHandler::SubmitJob(std::string_view authorization, const proto::SubmitJobRequest& request,
                             proto::SubmitJobResponse* response) {
  FB_ASSIGN_OR_RETURN(Principal p, Authenticate(authorization));
  FB_RETURN_IF_ERROR(CheckJobService(p));
  FB_RETURN_IF_ERROR(CheckName("spec.name", request.spec().name(), kMaxNameBytes));
  StatusOr<Config> config = fullband::FromProto(request.spec().config());
  if (!config.ok()) {
    return InvalidArgumentError("spec.config." + config.status().message());
  }
  if (!request.request_id().empty()) {
    FB_RETURN_IF_ERROR(CheckName("request_id", request.request_id(), kMaxIdBytes));
  }
  JobSpec spec{request.spec().name(), p.user, std::move(*config)};
  StatusOr<std::string> id = coordinator_->SubmitJob(std::move(spec), request.request_id());
  if (!id.ok()) {
    if (id.status().code() == StatusCode::kInvalidArgument) {
      return InvalidArgumentError("spec.config." + id.status().message());
    }
    return id.status();
  }
  response->set_job_id(*id);
  return OkStatus();
}

Status RpcHandler::GetJob(std::string_view authorization, const proto::GetJobRequest& request,
                          proto::Job* response) {
  FB_RETURN_IF_ERROR(JobCaller(authorization, request.job_id()).status());
  FB_ASSIGN_OR_RETURN(JobInfo job, coordinator_->GetJob(request.job_id()));
  ToProto(job, response);
  return OkStatus();
}

Status RpcHandler::ListJobs(std::string_view authorization, const proto::ListJobsRequest& request,
                            proto::ListJobsResponse* response) {
  FB_ASSIGN_OR_RETURN(Principal p, Authenticate(authorization));
  FB_RETURN_IF_ERROR(CheckJobService(p));
  const std::string owner = p.role == Role::kAdmin ? "" : p.user;
  for (const JobInfo& job : coordinator_->ListJobs(owner, request.include_finished())) {
    ToProto(job, response->add_jobs());
  }
  return OkStatus();
}

Status RpcHandler::CancelJob(std::string_view authorization, const proto::CancelJobRequest& request,
                             proto::Job* response) {
  FB_ASSIGN_OR_RETURN(Principal p, JobCaller(authorization, request.job_id()));
  FB_RETURN_IF_ERROR(CheckLength("reason", request.reason(), 0, 1024));
  const std::string reason = request.reason().empty() ? "cancelled by " + p.user : request.reason();
  FB_ASSIGN_OR_RETURN(JobInfo job, coordinator_->CancelJob(request.job_id(), reason));
  ToProto(job, response);
  return OkStatus();
}

Status RpcHandler::GetJobHistory(std::string_view authorization,
                                 const proto::GetJobHistoryRequest& request,
                                 proto::GetJobHistoryResponse* response) {
  FB_RETURN_IF_ERROR(JobCaller(authorization, request.job_id()).status());
  if (request.start_step() < 0) return InvalidArgumentError("start_step: must be >= 0");
  if (request.max_steps() < 0 || request.max_steps() > kMaxHistoryPage) {
    return InvalidArgumentError("max_steps: " + std::to_string(request.max_steps()) +
                                ", expected 0.." + std::to_string(kMaxHistoryPage));
  }
  const int64_t page = request.max_steps() == 0 ? kDefaultHistoryPage : request.max_steps();
  FB_ASSIGN_OR_RETURN(HistoryPage steps,
                      coordinator_->History(request.job_id(), request.start_step(), page));
  ToProto(steps, response);
  return OkStatus();
}

Status RpcHandler::StartWatch(std::string_view authorization,
                              const proto::WatchJobRequest& request) {
  return JobCaller(authorization, request.job_id()).status();
}

StatusOr<JobInfo> RpcHandler::WatchState(const std::string& job_id) const {
  return coordinator_->GetJob(job_id);
}

Status RpcHandler::RegisterWorkerGroup(std::string_view authorization,
                                       const proto::RegisterWorkerGroupRequest& request,
                                       proto::RegisterWorkerGroupResponse* response) {
  FB_RETURN_IF_ERROR(WorkerCaller(authorization, request.job_id()));
  FB_RETURN_IF_ERROR(CheckIncarnation(request.incarnation()));
  if (request.attempt() < 0) return InvalidArgumentError("attempt: must be >= 0");
  if (request.world_size() < 1) return InvalidArgumentError("world_size: must be >= 1");
  FB_RETURN_IF_ERROR(CheckLength("host", request.host(), 0, 256));
  FB_ASSIGN_OR_RETURN(Registration reg,
                      coordinator_->RegisterWorkerGroup(request.job_id(), request.incarnation(),
                                                        request.attempt(), request.world_size()));
  *response->mutable_config() = fullband::ToProto(reg.config);
  response->set_resume_step(reg.resume_step);
  response->set_checkpoint_path(reg.checkpoint_path);
  response->set_total_steps(reg.total_steps);
  response->set_heartbeat_interval_seconds(coordinator_->options().heartbeat_interval_seconds);
  response->set_heartbeat_timeout_seconds(coordinator_->options().heartbeat_timeout_seconds);
  return OkStatus();
}

Status RpcHandler::Heartbeat(std::string_view authorization, const proto::HeartbeatRequest& request,
                             proto::HeartbeatResponse* response) {
  FB_RETURN_IF_ERROR(WorkerCaller(authorization, request.job_id()));
  FB_RETURN_IF_ERROR(CheckIncarnation(request.incarnation()));
  FB_ASSIGN_OR_RETURN(JobState state,
                      coordinator_->Heartbeat(request.job_id(), request.incarnation()));
  response->set_state(ToProto(state));
  return OkStatus();
}

Status RpcHandler::LeaseBatches(std::string_view authorization,
                                const proto::LeaseBatchesRequest& request,
                                proto::LeaseBatchesResponse* response) {
  FB_RETURN_IF_ERROR(WorkerCaller(authorization, request.job_id()));
  FB_RETURN_IF_ERROR(CheckIncarnation(request.incarnation()));
  if (request.from_step() < 0) return InvalidArgumentError("from_step: must be >= 0");
  if (request.count() < 1 || request.count() > coordinator_->options().max_lease) {
    return InvalidArgumentError("count: " + std::to_string(request.count()) + " outside 1.." +
                                std::to_string(coordinator_->options().max_lease));
  }
  FB_ASSIGN_OR_RETURN(LeaseResult lease,
                      coordinator_->LeaseBatches(request.job_id(), request.incarnation(),
                                                 request.from_step(), request.count()));
  for (const StepAssignment& a : lease.steps) *response->add_steps() = ToProto(a);
  response->set_budget_exhausted(lease.budget_exhausted);
  return OkStatus();
}

Status RpcHandler::ReportStep(std::string_view authorization,
                              const proto::ReportStepRequest& request,
                              proto::ReportStepResponse* response) {
  FB_RETURN_IF_ERROR(WorkerCaller(authorization, request.job_id()));
  FB_RETURN_IF_ERROR(CheckIncarnation(request.incarnation()));
  if (request.step() < 0) return InvalidArgumentError("step: must be >= 0");
  if (request.tokens() < 1) return InvalidArgumentError("tokens: must be >= 1");
  if (request.passes() < 1 || request.passes() > kMaxPasses) {
    return InvalidArgumentError("passes: " + std::to_string(request.passes()) + " outside 1.." +
                                std::to_string(kMaxPasses));
  }
  if (request.losses_size() != request.passes()) {
    return InvalidArgumentError("losses: " + std::to_string(request.losses_size()) +
                                " values for " + std::to_string(request.passes()) + " passes");
  }
  for (int i = 0; i < request.losses_size(); ++i) {
    if (!std::isfinite(request.losses(i))) {
      return InvalidArgumentError("losses[" + std::to_string(i) + "]: not finite");
    }
  }
  if (!std::isfinite(request.step_seconds()) || request.step_seconds() < 0) {
    return InvalidArgumentError("step_seconds: must be a finite number >= 0");
  }
  StepReport r;
  r.job_id = request.job_id();
  r.incarnation = request.incarnation();
  r.step = request.step();
  r.tokens = request.tokens();
  r.passes = request.passes();
  r.losses.assign(request.losses().begin(), request.losses().end());
  r.step_seconds = request.step_seconds();
  FB_ASSIGN_OR_RETURN(ReportResult result, coordinator_->ReportStep(r));
  response->set_duplicate(result.duplicate);
  response->set_job_completed(result.job_completed);
  return OkStatus();
}

Status RpcHandler::CommitCheckpoint(std::string_view authorization,
                                    const proto::CommitCheckpointRequest& request,
                                    proto::CommitCheckpointResponse* /*response*/) {
  FB_RETURN_IF_ERROR(WorkerCaller(authorization, request.job_id()));
  FB_RETURN_IF_ERROR(CheckIncarnation(request.incarnation()));
  if (request.step() < 1) return InvalidArgumentError("step: must be >= 1");
  FB_RETURN_IF_ERROR(CheckLength("path", request.path(), 1, kMaxPathBytes));
  if (request.shards() < 1 || request.shards() > 1'000'000) {
    return InvalidArgumentError("shards: " + std::to_string(request.shards()) +
                                " outside 1..1000000");
  }
  return coordinator_->CommitCheckpoint(request.job_id(), request.incarnation(), request.step(),
                                        request.path(), request.shards());
}

Status RpcHandler::RollBackCheckpoint(std::string_view authorization,
                                      const proto::RollBackCheckpointRequest& request,
                                      proto::RollBackCheckpointResponse* /*response*/) {
  FB_RETURN_IF_ERROR(WorkerCaller(authorization, request.job_id()));
  FB_RETURN_IF_ERROR(CheckIncarnation(request.incarnation()));
  if (request.step() < 0) return InvalidArgumentError("step: must be >= 0");
  FB_RETURN_IF_ERROR(CheckLength("path", request.path(), 0, kMaxPathBytes));
  FB_RETURN_IF_ERROR(CheckLength("reason", request.reason(), 1, kMaxReasonBytes));
  return coordinator_->RollBackCheckpoint(request.job_id(), request.incarnation(), request.step(),
                                          request.path(), request.reason());
}

Status RpcHandler::ReportFailure(std::string_view authorization,
                                 const proto::ReportFailureRequest& request,
                                 proto::ReportFailureResponse* /*response*/) {
  FB_RETURN_IF_ERROR(WorkerCaller(authorization, request.job_id()));
  FB_RETURN_IF_ERROR(CheckIncarnation(request.incarnation()));
  FB_RETURN_IF_ERROR(CheckLength("reason", request.reason(), 1, kMaxReasonBytes));
  return coordinator_->ReportFailure(request.job_id(), request.incarnation(), request.reason());
}

void RpcHandler::AfterDurable(std::function<void(const Status&)> done) const {
  Store* store = coordinator_->store();
  store->WhenDurable(store->LastAppended(), std::move(done));
}

}  // namespace fullband::coordinator

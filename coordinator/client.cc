#include "coordinator/client.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <random>

#include "common/logging.h"
#include "coordinator/tls.h"
#include "proto/coordinator.grpc.pb.h"

namespace fullband::coordinator {
namespace {

Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return OkStatus();
  return Status(static_cast<StatusCode>(static_cast<int>(s.error_code())), s.error_message());
}

bool Retryable(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::UNAVAILABLE ||
         s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
}

// Calls rpc(context) until it succeeds, fails for good, or runs out of attempts.
template <typename Rpc>
Status Call(const ClientOptions& o, Rpc&& rpc) {
  double backoff = o.retry_backoff_seconds;
  for (int attempt = 1;; ++attempt) {
    grpc::ClientContext context;
    context.set_deadline(
        std::chrono::system_clock::now() +
        std::chrono::milliseconds(static_cast<int64_t>(o.rpc_timeout_seconds * 1000)));
    if (!o.token.empty()) context.AddMetadata("authorization", "Bearer " + o.token);
    const grpc::Status s = rpc(&context);
    if (s.ok() || !Retryable(s) || attempt >= o.max_attempts) return FromGrpc(s);
    std::this_thread::sleep_for(std::chrono::duration<double>(backoff));
    backoff = std::min(o.max_retry_backoff_seconds, backoff * 2);
  }
}

uint64_t NewIncarnation() {
  std::random_device rd;
  uint64_t v = 0;
  while (v == 0) v = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return v;
}

}  // namespace

StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const ClientOptions& o, bool own_connection) {
  grpc::ChannelArguments args;
  if (own_connection) args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (o.tls_ca_file.empty()) {
    credentials = grpc::InsecureChannelCredentials();
  } else {
    FB_ASSIGN_OR_RETURN(credentials, MakeClientTlsCredentials(o.tls_ca_file));
    if (!o.tls_server_name.empty()) args.SetSslTargetNameOverride(o.tls_server_name);
  }
  return grpc::CreateCustomChannel(o.address, credentials, args);
}

// ---- JobClient

struct JobClient::Impl {
  ClientOptions options;
  std::unique_ptr<proto::JobService::Stub> stub;
};

JobClient::JobClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
JobClient::~JobClient() = default;

StatusOr<std::unique_ptr<JobClient>> JobClient::Connect(const ClientOptions& options) {
  FB_ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel, MakeChannel(options));
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->stub = proto::JobService::NewStub(channel);
  return std::unique_ptr<JobClient>(new JobClient(std::move(impl)));
}

StatusOr<std::string> JobClient::Submit(const proto::JobSpec& spec) {
  proto::SubmitJobRequest request;
  *request.mutable_spec() = spec;
  // One id for every retry of this submit: a retry after a lost answer returns the first job.
  std::random_device rd;
  char id[33];
  std::snprintf(id, sizeof(id), "%08x%08x%08x%08x", rd(), rd(), rd(), rd());
  request.set_request_id(id);
  proto::SubmitJobResponse response;
  FB_RETURN_IF_ERROR(Call(impl_->options, [&](grpc::ClientContext* c) {
    return impl_->stub->SubmitJob(c, request, &response);
  }));
  return response.job_id();
}

StatusOr<proto::Job> JobClient::Get(const std::string& job_id) {
  proto::GetJobRequest request;
  request.set_job_id(job_id);
  proto::Job job;
  FB_RETURN_IF_ERROR(Call(impl_->options, [&](grpc::ClientContext* c) {
    return impl_->stub->GetJob(c, request, &job);
  }));
  return job;
}

StatusOr<std::vector<proto::Job>> JobClient::List(bool include_finished) {
  proto::ListJobsRequest request;
  request.set_include_finished(include_finished);
  proto::ListJobsResponse response;
  FB_RETURN_IF_ERROR(Call(impl_->options, [&](grpc::ClientContext* c) {
    return impl_->stub->ListJobs(c, request, &response);
  }));
  return std::vector<proto::Job>(response.jobs().begin(), response.jobs().end());
}

StatusOr<proto::Job> JobClient::Cancel(const std::string& job_id, const std::string& reason) {
  proto::CancelJobRequest request;
  request.set_job_id(job_id);
  request.set_reason(reason);
  proto::Job job;
  FB_RETURN_IF_ERROR(Call(impl_->options, [&](grpc::ClientContext* c) {
    return impl_->stub->CancelJob(c, request, &job);
  }));
  return job;
}

StatusOr<std::vector<proto::StepRecord>> JobClient::History(const std::string& job_id,
                                                            int64_t start_step) {
  std::vector<proto::StepRecord> steps;
  proto::GetJobHistoryRequest request;
  request.set_job_id(job_id);
  for (int64_t next = start_step; next >= 0;) {
    request.set_start_step(next);
    proto::GetJobHistoryResponse page;
    FB_RETURN_IF_ERROR(Call(impl_->options, [&](grpc::ClientContext* c) {
      return impl_->stub->GetJobHistory(c, request, &page);
    }));
    steps.insert(steps.end(), page.steps().begin(), page.steps().end());
    next = page.next_start_step();
  }
  return steps;
}

Status JobClient::Watch(const std::string& job_id,
                        const std::function<bool(const proto::Job&)>& on_event,
                        std::chrono::milliseconds timeout) {
  proto::WatchJobRequest request;
  request.set_job_id(job_id);
  grpc::ClientContext context;
  if (timeout.count() > 0) context.set_deadline(std::chrono::system_clock::now() + timeout);
  if (!impl_->options.token.empty()) {
    context.AddMetadata("authorization", "Bearer " + impl_->options.token);
  }
  std::unique_ptr<grpc::ClientReader<proto::JobEvent>> reader =
      impl_->stub->WatchJob(&context, request);
  proto::JobEvent event;
  while (reader->Read(&event)) {
    if (!on_event(event.job())) {
      context.TryCancel();
      reader->Finish().ok();
      return Status(StatusCode::kCancelled, "watch stopped by the caller");
    }
  }
  return FromGrpc(reader->Finish());
}

// ---- WorkerClient

struct WorkerClient::Impl {
  std::unique_ptr<proto::WorkerService::Stub> stub;
};

StatusOr<std::unique_ptr<WorkerClient>> WorkerClient::Register(const ClientOptions& options,
                                                               const std::string& job_id,
                                                               int64_t attempt, int64_t world_size,
                                                               int lease_ahead) {
  FB_ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel, MakeChannel(options));
  std::unique_ptr<WorkerClient> w(new WorkerClient());
  w->impl_ = std::make_unique<Impl>();
  w->impl_->stub = proto::WorkerService::NewStub(channel);
  w->options_ = options;
  w->job_id_ = job_id;
  w->incarnation_ = NewIncarnation();
  w->lease_ahead_ = std::max(1, lease_ahead);
  proto::RegisterWorkerGroupRequest request;
  request.set_job_id(job_id);
  request.set_incarnation(w->incarnation_);
  request.set_attempt(attempt);
  request.set_world_size(world_size);
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) == 0) request.set_host(host);
  FB_RETURN_IF_ERROR(Call(options, [&](grpc::ClientContext* c) {
    return w->impl_->stub->RegisterWorkerGroup(c, request, &w->registration_);
  }));
  w->next_step_ = w->registration_.resume_step();
  WorkerClient* self = w.get();
  w->heartbeat_ = std::thread([self] { self->HeartbeatLoop(); });
  return w;
}

WorkerClient::~WorkerClient() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closing_ = true;
  }
  cv_.notify_all();
  if (heartbeat_.joinable()) heartbeat_.join();
}

std::string WorkerClient::stop_reason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stop_reason_;
}

// Note [Heartbeats after a coordinator restart]: a channel whose connection failed waits out
// gRPC's reconnect back-off (a second and more, growing with each failure) before it dials
// again, so beats on it keep failing for a while after a restarted coordinator is listening,
// which can outlast the heartbeat timeout. After a failed beat the next one goes on a new
// channel with a connection of its own, which dials at once.
void WorkerClient::HeartbeatLoop() {
  const auto interval =
      std::chrono::duration<double>(std::max(0.01, registration_.heartbeat_interval_seconds()));
  ClientOptions o = options_;
  o.max_attempts = 1;  // the next beat is the retry
  std::unique_ptr<proto::WorkerService::Stub> stub;
  std::unique_lock<std::mutex> lock(mu_);
  while (!closing_) {
    cv_.wait_for(lock, interval, [this] { return closing_; });
    if (closing_) break;
    lock.unlock();
    proto::HeartbeatRequest request;
    request.set_job_id(job_id_);
    request.set_incarnation(incarnation_);
    proto::HeartbeatResponse response;
    Status s = OkStatus();
    if (!stub) {
      StatusOr<std::shared_ptr<grpc::Channel>> channel = MakeChannel(o, /*own_connection=*/true);
      if (channel.ok()) stub = proto::WorkerService::NewStub(*channel);
      s = channel.status();
    }
    if (stub) {
      s = Call(o, [&](grpc::ClientContext* c) { return stub->Heartbeat(c, request, &response); });
    }
    if (s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded) {
      stub.reset();
    }
    lock.lock();
    std::string why;
    if (s.code() == StatusCode::kAborted || s.code() == StatusCode::kNotFound ||
        s.code() == StatusCode::kPermissionDenied) {
      why = s.ToString();
    } else if (s.ok() && response.state() != proto::JOB_STATE_RUNNING &&
               response.state() != proto::JOB_STATE_LAUNCHING) {
      why = "job is " + proto::JobState_Name(response.state());
    } else if (!s.ok()) {
      FB_LOG(WARNING) << "heartbeat: " << s.ToString();
    }
    if (!why.empty() && !stop_.load()) {
      stop_reason_ = why;
      stop_.store(true);
    }
  }
}

StatusOr<std::optional<proto::StepAssignment>> WorkerClient::NextStep() {
  if (leased_.empty() && !exhausted_) {
    proto::LeaseBatchesRequest request;
    request.set_job_id(job_id_);
    request.set_incarnation(incarnation_);
    request.set_from_step(next_step_);
    request.set_count(lease_ahead_);
    proto::LeaseBatchesResponse response;
    FB_RETURN_IF_ERROR(Call(options_, [&](grpc::ClientContext* c) {
      return impl_->stub->LeaseBatches(c, request, &response);
    }));
    for (const proto::StepAssignment& a : response.steps()) leased_.push_back(a);
    exhausted_ = response.budget_exhausted();
  }
  if (leased_.empty()) return std::optional<proto::StepAssignment>();
  proto::StepAssignment a = leased_.front();
  leased_.pop_front();
  next_step_ = a.step() + 1;
  return std::optional<proto::StepAssignment>(std::move(a));
}

StatusOr<proto::ReportStepResponse> WorkerClient::Report(const proto::StepAssignment& step,
                                                         const std::vector<double>& losses,
                                                         double step_seconds) {
  proto::ReportStepRequest request;
  request.set_job_id(job_id_);
  request.set_incarnation(incarnation_);
  request.set_step(step.step());
  request.set_tokens(step.tokens());
  request.set_passes(step.passes());
  for (double l : losses) request.add_losses(l);
  request.set_step_seconds(step_seconds);
  proto::ReportStepResponse response;
  FB_RETURN_IF_ERROR(Call(options_, [&](grpc::ClientContext* c) {
    return impl_->stub->ReportStep(c, request, &response);
  }));
  return response;
}

Status WorkerClient::Commit(int64_t step, const std::string& path, int64_t shards) {
  proto::CommitCheckpointRequest request;
  request.set_job_id(job_id_);
  request.set_incarnation(incarnation_);
  request.set_step(step);
  request.set_path(path);
  request.set_shards(shards);
  proto::CommitCheckpointResponse response;
  return Call(options_, [&](grpc::ClientContext* c) {
    return impl_->stub->CommitCheckpoint(c, request, &response);
  });
}

Status WorkerClient::RollBack(int64_t step, const std::string& path, const std::string& reason) {
  proto::RollBackCheckpointRequest request;
  request.set_job_id(job_id_);
  request.set_incarnation(incarnation_);
  request.set_step(step);
  request.set_path(path);
  request.set_reason(reason.substr(0, 4000));
  proto::RollBackCheckpointResponse response;
  FB_RETURN_IF_ERROR(Call(options_, [&](grpc::ClientContext* c) {
    return impl_->stub->RollBackCheckpoint(c, request, &response);
  }));
  leased_.clear();
  exhausted_ = false;
  next_step_ = step;
  return OkStatus();
}

Status WorkerClient::Fail(const std::string& reason) {
  proto::ReportFailureRequest request;
  request.set_job_id(job_id_);
  request.set_incarnation(incarnation_);
  request.set_reason(reason);
  proto::ReportFailureResponse response;
  return Call(options_, [&](grpc::ClientContext* c) {
    return impl_->stub->ReportFailure(c, request, &response);
  });
}

}  // namespace fullband::coordinator

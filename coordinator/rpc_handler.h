// RpcHandler: the proto adapter of the coordinator (the middle layer, docs/DESIGN.md §7). It
// authenticates and authorizes the caller (auth.h), validates every request field
// (INVALID_ARGUMENT naming the field), converts proto <-> the logic's types and calls the
// Coordinator. It never includes gRPC: the transport hands it the `authorization` header and
// the request, and turns the returned Status into a grpc::Status.
//
// Durability: a method that returns OK may have appended writes; the transport acknowledges
// only from the callback of AfterDurable (Note [Acknowledge after durable], coordinator.cc).
// Thread-safe; the Coordinator, Store and Authenticator are not owned.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "coordinator/auth.h"
#include "coordinator/coordinator.h"
#include "proto/coordinator.pb.h"

namespace fullband::coordinator {

class RpcHandler {
 public:
  // Longest string fields, and the most losses a report may carry.
  static constexpr size_t kMaxIdBytes = 64;
  static constexpr size_t kMaxNameBytes = 128;
  static constexpr size_t kMaxReasonBytes = 4096;
  static constexpr size_t kMaxPathBytes = 4096;
  static constexpr int kMaxPasses = 64;
  // GetJobHistory's page: its default and its largest.
  static constexpr int kDefaultHistoryPage = 1000;
  static constexpr int kMaxHistoryPage = 10000;

  // `auth` null: authentication is off and every caller is the admin "local" (for a coordinator
  // bound to loopback only).
  RpcHandler(Coordinator* coordinator, const Authenticator* auth);

  // Each: UNAUTHENTICATED / PERMISSION_DENIED from auth, INVALID_ARGUMENT for a bad field,
  // then the codes of proto/coordinator.proto.
  Status SubmitJob(std::string_view authorization, const proto::SubmitJobRequest& request,
                   proto::SubmitJobResponse* response);
  Status GetJob(std::string_view authorization, const proto::GetJobRequest& request,
                proto::Job* response);
  Status ListJobs(std::string_view authorization, const proto::ListJobsRequest& request,
                  proto::ListJobsResponse* response);
  Status CancelJob(std::string_view authorization, const proto::CancelJobRequest& request,
                   proto::Job* response);
  Status GetJobHistory(std::string_view authorization, const proto::GetJobHistoryRequest& request,
                       proto::GetJobHistoryResponse* response);
  // Checks that the caller may watch the job; then the transport polls WatchState.
  Status StartWatch(std::string_view authorization, const proto::WatchJobRequest& request);
  // The job now and its change counter (NOT_FOUND).
  StatusOr<JobInfo> WatchState(const std::string& job_id) const;

  Status RegisterWorkerGroup(std::string_view authorization,
                             const proto::RegisterWorkerGroupRequest& request,
                             proto::RegisterWorkerGroupResponse* response);
  Status Heartbeat(std::string_view authorization, const proto::HeartbeatRequest& request,
                   proto::HeartbeatResponse* response);
  Status LeaseBatches(std::string_view authorization, const proto::LeaseBatchesRequest& request,
                      proto::LeaseBatchesResponse* response);
  Status ReportStep(std::string_view authorization, const proto::ReportStepRequest& request,
                    proto::ReportStepResponse* response);
  Status CommitCheckpoint(std::string_view authorization,
                          const proto::CommitCheckpointRequest& request,
                          proto::CommitCheckpointResponse* response);
  Status RollBackCheckpoint(std::string_view authorization,
                            const proto::RollBackCheckpointRequest& request,
                            proto::RollBackCheckpointResponse* response);
  Status ReportFailure(std::string_view authorization, const proto::ReportFailureRequest& request,
                       proto::ReportFailureResponse* response);

  // Calls done(status) once everything the handler has written so far is durable.
  void AfterDurable(std::function<void(const Status&)> done) const;

 private:
  StatusOr<Principal> Authenticate(std::string_view authorization) const;
  // Authenticates a JobService caller and checks that it may see `job_id`.
  StatusOr<Principal> JobCaller(std::string_view authorization, const std::string& job_id) const;
  Status WorkerCaller(std::string_view authorization, const std::string& job_id) const;

  Coordinator* coordinator_;
  const Authenticator* auth_;
};

}  // namespace fullband::coordinator

// Clients of the coordinator: JobClient for users (the CLI) and WorkerClient for rank 0 of a
// worker group — register with a fresh incarnation, heartbeat in the background, lease steps
// ahead, report, commit, fail. Every call retries UNAVAILABLE and DEADLINE_EXCEEDED with
// doubling back-off (all worker calls are idempotent: a repeated report is not counted twice);
// other errors are returned as they came.
//
// Threading: a JobClient may be used from any thread. A WorkerClient's calls come from one
// thread (the training loop); its heartbeat runs on its own thread and only sets flags.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "proto/coordinator.pb.h"

namespace grpc {
class Channel;
}  // namespace grpc

namespace fullband::coordinator {

struct ClientOptions {
  std::string address = "127.0.0.1:7070";
  std::string token;            // bearer token; "" sends none
  std::string tls_ca_file;      // PEM of the CA that signed the server; "" = plaintext
  std::string tls_server_name;  // overrides the name checked in the certificate ("" = host)
  double rpc_timeout_seconds = 30;
  int max_attempts = 8;  // per call, for UNAVAILABLE / DEADLINE_EXCEEDED
  double retry_backoff_seconds = 0.05;
  double max_retry_backoff_seconds = 5;
};

// Errors of MakeClientTlsCredentials (tls.h) when the CA file is bad. With `own_connection` the
// channel's connection is its own, not shared with other channels to the same address through
// gRPC's global subchannel pool (nor its reconnect back-off).
StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const ClientOptions& options,
                                                     bool own_connection = false);

class JobClient {
 public:
  static StatusOr<std::unique_ptr<JobClient>> Connect(const ClientOptions& options);
  ~JobClient();

  StatusOr<std::string> Submit(const proto::JobSpec& spec);
  StatusOr<proto::Job> Get(const std::string& job_id);
  StatusOr<std::vector<proto::Job>> List(bool include_finished);
  StatusOr<proto::Job> Cancel(const std::string& job_id, const std::string& reason);
  // Every counted step from `start_step` on, page by page (GetJobHistory).
  StatusOr<std::vector<proto::StepRecord>> History(const std::string& job_id,
                                                   int64_t start_step = 0);
  // Calls on_event for every event until the stream ends (a terminal state: OK) or
  // on_event returns false (CANCELLED).
  // `timeout` > 0 ends the watch with DEADLINE_EXCEEDED after that long.
  Status Watch(const std::string& job_id, const std::function<bool(const proto::Job&)>& on_event,
               std::chrono::milliseconds timeout = std::chrono::milliseconds(0));

 private:
  struct Impl;
  explicit JobClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

class WorkerClient {
 public:
  // Registers a new incarnation of the job's worker group for `attempt` and starts the
  // heartbeat thread. `lease_ahead` steps are leased per LeaseBatches.
  static StatusOr<std::unique_ptr<WorkerClient>> Register(const ClientOptions& options,
                                                          const std::string& job_id,
                                                          int64_t attempt, int64_t world_size,
                                                          int lease_ahead = 16);
  ~WorkerClient();  // stops the heartbeat

  const proto::RegisterWorkerGroupResponse& registration() const { return registration_; }
  uint64_t incarnation() const { return incarnation_; }

  // The assignment of the next step, starting at registration().resume_step(); nullopt once
  // the budget is exhausted.
  StatusOr<std::optional<proto::StepAssignment>> NextStep();
  // Reports a finished step (durable when it returns OK).
  StatusOr<proto::ReportStepResponse> Report(const proto::StepAssignment& step,
                                             const std::vector<double>& losses,
                                             double step_seconds);
  Status Commit(int64_t step, const std::string& path, int64_t shards);
  // The group restarted from the older checkpoint at `path` (step `step`; "" and 0: from
  // scratch) because the registration's could not be loaded: the coordinator rolls back to it
  // and the next leases start at `step`.
  Status RollBack(int64_t step, const std::string& path, const std::string& reason);
  Status Fail(const std::string& reason);

  // True once a heartbeat learned that this group must stop: the job finished, is restarting,
  // or another incarnation replaced this one.
  bool should_stop() const { return stop_.load(); }
  std::string stop_reason() const;

 private:
  WorkerClient() = default;
  void HeartbeatLoop();

  struct Impl;
  std::unique_ptr<Impl> impl_;
  ClientOptions options_;
  std::string job_id_;
  uint64_t incarnation_ = 0;
  int lease_ahead_ = 16;
  proto::RegisterWorkerGroupResponse registration_;
  std::deque<proto::StepAssignment> leased_;
  int64_t next_step_ = 0;
  bool exhausted_ = false;

  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool closing_ = false;
  std::string stop_reason_;
  std::thread heartbeat_;
};

}  // namespace fullband::coordinator

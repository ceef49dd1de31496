// Coordinator: the job logic of the coordinator (docs/DESIGN.md §7) — state machine, leases,
// ledger, budgets, heartbeats, failure handling — as plain C++: no gRPC, no proto on its interface.
// RpcHandler adapts it to the wire; tests drive it with a fake clock and launcher.
//
// Threading: every method is thread-safe (one mutex). Launcher calls run outside it, and only
// in Tick: a kill decided by an RPC (CancelJob, ReportFailure) waits for the next tick, so no
// RPC thread blocks in Launcher::Kill's grace period.
// Durability: every method that changes state appends its writes to the Store before it
// returns; a caller that acknowledges anything to a remote must first wait for
// store.WhenDurable(store.LastAppended()) (Note [Acknowledge after durable]).
// Time-driven transitions (launch, relaunch after back-off, missed heartbeats, exited worker
// groups) happen in Tick(), which the service calls about once a second.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/config.h"
#include "common/status.h"
#include "common/step_plan.h"
#include "coordinator/clock.h"
#include "coordinator/job.h"
#include "coordinator/job_store.h"
#include "coordinator/launcher.h"
#include "coordinator/store.h"

namespace fullband::coordinator {

struct CoordinatorOptions {
  double heartbeat_interval_seconds = 10;  // what workers are told to use
  double heartbeat_timeout_seconds = 60;   // a RUNNING group silent this long has failed
  double launch_timeout_seconds = 600;     // a launched group must register within this
  std::string jobs_dir = "fullband-jobs";  // <jobs_dir>/<job>/ holds the attempts' logs
  std::string worker_tls_ca;               // given to workers as FULLBAND_TLS_CA ("" = not set)
  std::string advertise_address;           // FULLBAND_COORDINATOR given to workers
  int64_t max_lease = 1024;                // steps per LeaseBatches
  // Mints the bearer token of a job attempt's workers (FULLBAND_WORKER_TOKEN); unset or an
  // empty token = none. Only the token's digest is stored with the job (tokens never rest on
  // disk); after a restart of the coordinator restore_worker_token re-admits it by the digest
  // for every unfinished job, and revoke_worker_tokens is called a heartbeat timeout after a
  // job finishes. All three are called with the coordinator's lock held.
  struct MintedToken {
    std::string token;
    std::string digest;  // what the store keeps
  };
  std::function<MintedToken(const std::string& job_id)> mint_worker_token;
  std::function<void(const std::string& job_id, const std::string& digest)> restore_worker_token;
  std::function<void(const std::string& job_id)> revoke_worker_tokens;
};

struct Registration {
  Config config;
  int64_t resume_step = 0;
  std::string checkpoint_path;
  int64_t total_steps = 0;
};

struct LeaseResult {
  std::vector<StepAssignment> steps;
  bool budget_exhausted = false;
};

struct StepReport {
  std::string job_id;
  uint64_t incarnation = 0;
  int64_t step = 0;
  int64_t tokens = 0;
  int64_t passes = 0;
  std::vector<double> losses;
  double step_seconds = 0;
};

struct ReportResult {
  bool duplicate = false;
  bool job_completed = false;
};

class Coordinator {
 public:
  // Loads every job from `store`. Running jobs continue: their heartbeat and launch deadlines
  // restart from now. `launchers` maps a launcher kind to its implementation; none of the
  // pointers is owned and all must outlive the Coordinator. DATA_LOSS on an unreadable record.
  static StatusOr<std::unique_ptr<Coordinator>> Create(CoordinatorOptions options,
                                                       const Clock* clock,
                                                       std::map<LauncherKind, Launcher*> launchers,
                                                       Store* store);
  ~Coordinator();

  // ---- JobService

  // Stores a PENDING job and returns its id ("job-000001", ...). INVALID_ARGUMENT: the config
  // does not validate, its budget does not plan (StepPlan::Create), or its launcher kind
  // is not available here.
  // `request_id` (may be ""): a repeated submit of the same owner and request id returns the
  // first job (ALREADY_EXISTS naming it when the spec differs).
  StatusOr<std::string> SubmitJob(JobSpec spec, const std::string& request_id = "");
  // NOT_FOUND.
  StatusOr<JobInfo> GetJob(const std::string& job_id) const;
  // Jobs of `owner` ("" = all), oldest first; finished ones only with include_finished.
  std::vector<JobInfo> ListJobs(const std::string& owner, bool include_finished) const;
  // Kills the worker group and moves the job to CANCELLED; OK and unchanged for a finished
  // job. NOT_FOUND.
  StatusOr<JobInfo> CancelJob(const std::string& job_id, const std::string& reason);
  // The job's counted steps from `start_step` on, at most `max_steps` (> 0), read from the
  // store (GetJobHistory in proto/coordinator.proto). NOT_FOUND; UNAVAILABLE when the store
  // cannot be read; DATA_LOSS for an unreadable step record.
  StatusOr<HistoryPage> History(const std::string& job_id, int64_t start_step,
                                int64_t max_steps) const;

  // ---- WorkerService (error codes as in proto/coordinator.proto)

  StatusOr<Registration> RegisterWorkerGroup(const std::string& job_id, uint64_t incarnation,
                                             int64_t attempt, int64_t world_size);
  StatusOr<JobState> Heartbeat(const std::string& job_id, uint64_t incarnation);
  StatusOr<LeaseResult> LeaseBatches(const std::string& job_id, uint64_t incarnation,
                                     int64_t from_step, int64_t count);
  StatusOr<ReportResult> ReportStep(const StepReport& report);
  Status CommitCheckpoint(const std::string& job_id, uint64_t incarnation, int64_t step,
                          const std::string& path, int64_t shards);
  Status ReportFailure(const std::string& job_id, uint64_t incarnation, const std::string& reason);
  Status RollBackCheckpoint(const std::string& job_id, uint64_t incarnation, int64_t step,
                            const std::string& path, const std::string& reason);

  // Launches PENDING jobs, relaunches RESTARTING jobs whose back-off is over, fails jobs whose
  // heartbeat or launch deadline passed or whose worker group exited.
  void Tick();

  const CoordinatorOptions& options() const { return options_; }
  // The FULLBAND_COORDINATOR address given to later launches (known once the server is bound).
  void set_advertise_address(const std::string& address);
  Store* store() const { return store_; }

 private:
  // coordinator/coordinator_job.h
  struct Job;
  struct Action;  // a launcher call to make outside the mutex
  struct Poll;    // a worker group to ask its launcher about, outside the mutex

  Coordinator(CoordinatorOptions options, const Clock* clock,
              std::map<LauncherKind, Launcher*> launchers, Store* store);
  Status Load();

  StatusOr<Job*> Find(const std::string& job_id) const;
  Status CheckIncarnation(const Job& job, uint64_t incarnation) const;
  JobInfo Info(const Job& job, double now) const;
  // Appends the job's state record (plus `extra`) to the store, bumps its version.
  void Persist(Job& job, double now, WriteSet extra = {});
  // Moves the counted steps after the last checkpoint to wasted (their records deleted by
  // `writes`) and forgets the registered worker group.
  void Rollback(Job& job, WriteSet& writes);
  // The job `job_id`, RUNNING under `incarnation`: NOT_FOUND, FAILED_PRECONDITION (not
  // RUNNING, checked first), ABORTED (another incarnation).
  StatusOr<Job*> RunningJob(const std::string& job_id, uint64_t incarnation);
  // Moves one counted step of `passes` passes from the ledger to wasted; deletes its record.
  static void Uncount(Job& job, int64_t step, int64_t passes, WriteSet& writes);
  // Rolls back, then RESTARTING or FAILED; returns the kill to make (if any).
  std::vector<Action> Fail(Job& job, const std::string& reason, double now);
  std::vector<Action> Finish(Job& job, JobState state, const std::string& reason, double now);

  // ---- The launch loop (launch_loop.cc), mu_ held unless said otherwise.

  // One job's turn in Tick: revokes a finished job's token when due, fails it past a deadline
  // (else adds its group to `polls`), launches it when PENDING or its back-off is over.
  std::vector<Action> Advance(Job& job, double now, std::vector<Poll>& polls);
  std::vector<Action> CheckDeadlines(Job& job, double now, std::vector<Poll>& polls);
  // The job becomes LAUNCHING; returns the launch to make.
  Action Launch(Job& job, double now);
  // What the launcher starts for the job's current attempt; mints its worker token.
  LaunchSpec LaunchSpecFor(Job& job);
  // What the launchers said of the polled groups (takes mu_); a group polled in an earlier
  // attempt, or since finished, is ignored.
  std::vector<Action> Observe(const std::vector<std::pair<Poll, LaunchState>>& seen);
  std::vector<Action> Observe(Job& job, const LaunchState& state, double now);
  // An attempt its launcher says is queued: Note [Pending attempts].
  std::vector<Action> Pending(Job& job, const LaunchState& state, double now);
  // Makes the launcher calls (mu_ not held; takes it to record their results).
  void Run(std::vector<Action> actions);
  // Queues launcher calls for the next Tick.
  void Defer(std::vector<Action> actions);

  CoordinatorOptions options_;  // advertise_address is guarded by mu_
  const Clock* clock_;
  const std::map<LauncherKind, Launcher*> launchers_;
  Store* store_;
  JobStore records_;  // store_'s records

  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<Job>> jobs_;
  // (owner, SubmitJobRequest.request_id) → job id, for idempotent submits.
  std::map<std::pair<std::string, std::string>, std::string> submitted_;
  std::vector<Action> deferred_;
  int64_t next_id_ = 1;
};

}  // namespace fullband::coordinator

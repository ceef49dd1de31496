// Coordinator logic with a fake clock and launcher: the job state machine, leases, the ledger
// and budgets, idempotent reports, failure handling with rollback and back-off, every error
// code, and a restart of the coordinator on the same store.
#include "coordinator/coordinator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "coordinator/proto_convert.h"
#include "proto/coordinator_store.pb.h"
#include "proto/reflect_fields.h"
#include "tests/common/fault_file_system.h"
#include "tests/coordinator/fakes.h"
#include "tests/proto/fill_every_field.h"

namespace fullband::coordinator {
namespace {

Config SmallConfig() {
  Config c = SmallTestConfig();
  c.launcher.command = {"worker"};
  c.launcher.max_restarts = 2;
  c.launcher.backoff_seconds = 10;
  c.launcher.max_backoff_seconds = 15;
  return c;
}

class CoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override { Open(); }

  void Open() {
    coordinator_.reset();
    if (!store_) {
      StatusOr<std::unique_ptr<Store>> store = Store::Open(dir_, in_memory_, file_system_);
      ASSERT_TRUE(store.ok()) << store.status().ToString();
      store_ = std::move(*store);
    }
    CoordinatorOptions options;
    options.heartbeat_timeout_seconds = 60;
    options.launch_timeout_seconds = 300;
    options.jobs_dir = "/jobs";
    options.advertise_address = "localhost:1234";
    options.mint_worker_token = [this](const std::string& job) {
      const std::string token = "token-" + job + "-" + std::to_string(++minted_);
      return CoordinatorOptions::MintedToken{token, "sha-" + std::to_string(minted_)};
    };
    options.restore_worker_token = [this](const std::string& job, const std::string& digest) {
      restored_.emplace_back(job, digest);
    };
    options.revoke_worker_tokens = [this](const std::string& job) { revoked_.push_back(job); };
    StatusOr<std::unique_ptr<Coordinator>> c =
        Coordinator::Create(options, &clock_, {{LauncherKind::kLocal, &launcher_}}, store_.get());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    coordinator_ = std::move(*c);
  }

  // Submits and brings the job to RUNNING with incarnation `inc`.
  std::string StartJob(Config config = SmallConfig(), uint64_t inc = 7) {
    StatusOr<std::string> id = coordinator_->SubmitJob({"test", "alice", config});
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    coordinator_->Tick();
    EXPECT_EQ(State(*id), JobState::kLaunching);
    StatusOr<Registration> reg = coordinator_->RegisterWorkerGroup(*id, inc, 0, 1);
    EXPECT_TRUE(reg.ok()) << reg.status().ToString();
    return *id;
  }

  JobState State(const std::string& id) { return coordinator_->GetJob(id)->state; }
  Ledger LedgerOf(const std::string& id) { return coordinator_->GetJob(id)->ledger; }

  StepReport Report(const std::string& id, int64_t step, uint64_t inc = 7) {
    StepReport r;
    r.job_id = id;
    r.incarnation = inc;
    r.step = step;
    r.tokens = 128;
    r.passes = 1;
    r.losses = {2.5};
    r.step_seconds = 0.5;
    return r;
  }

  // Leases and reports steps [from, to).
  void RunSteps(const std::string& id, int64_t from, int64_t to, uint64_t inc = 7) {
    ASSERT_TRUE(coordinator_->LeaseBatches(id, inc, from, to - from).ok());
    for (int64_t s = from; s < to; ++s) {
      StatusOr<ReportResult> r = coordinator_->ReportStep(Report(id, s, inc));
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      EXPECT_FALSE(r->duplicate);
    }
  }

  FakeClock clock_;
  FakeLauncher launcher_;
  std::shared_ptr<rocksdb::FileSystem> file_system_;  // null: the machine's
  int minted_ = 0;
  std::vector<std::string> revoked_;  // jobs whose worker tokens were revoked
  std::vector<std::pair<std::string, std::string>> restored_;  // (job, digest) at load
  std::string dir_ = "/coordinator-test";
  bool in_memory_ = true;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Coordinator> coordinator_;
};

TEST_F(CoordinatorTest, Submit_StoresAPendingJobWithItsPlan) {
  StatusOr<std::string> id = coordinator_->SubmitJob({"run", "alice", SmallConfig()});
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(*id, "job-000001");
  StatusOr<JobInfo> job = coordinator_->GetJob(*id);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->state, JobState::kPending);
  EXPECT_EQ(job->total_steps, 20);
  EXPECT_EQ(job->budget_amount, 128 * 20);
  EXPECT_EQ(job->spec.owner, "alice");
  EXPECT_EQ(*coordinator_->SubmitJob({"run", "bob", SmallConfig()}), "job-000002");
}

TEST_F(CoordinatorTest, Submit_BadConfigOrBudget_IsInvalidArgument) {
  Config bad = SmallConfig();
  bad.parallel.tp = 3;
  StatusOr<std::string> id = coordinator_->SubmitJob({"run", "alice", bad});
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(id.status().message().find("parallel.tp"), std::string::npos);
  Config tiny = SmallConfig();
  tiny.budget.amount = 10;
  EXPECT_EQ(coordinator_->SubmitJob({"run", "alice", tiny}).status().code(),
            StatusCode::kInvalidArgument);
  Config slurm = SmallConfig();
  slurm.launcher.kind = LauncherKind::kSlurm;
  StatusOr<std::string> s = coordinator_->SubmitJob({"run", "alice", slurm});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("launcher.kind: slurm is not available"), std::string::npos);
}

TEST_F(CoordinatorTest, Tick_LaunchesPendingJobWithItsSpec) {
  Config c = SmallConfig();
  c.parallel.dp = 2;
  c.launcher.extra_args = {"--flag"};
  const std::string id = *coordinator_->SubmitJob({"run", "alice", c});
  coordinator_->Tick();
  EXPECT_EQ(State(id), JobState::kLaunching);
  const std::vector<LaunchSpec> launches = launcher_.launches();
  ASSERT_EQ(launches.size(), 1u);
  const LaunchSpec& spec = launches[0];
  EXPECT_EQ(spec.job_id, id);
  EXPECT_EQ(spec.attempt, 0);
  EXPECT_EQ(spec.processes, 2);
  EXPECT_EQ(spec.command, (std::vector<std::string>{"worker", "--flag"}));
  EXPECT_EQ(spec.env.at("FULLBAND_JOB_ID"), id);
  EXPECT_EQ(spec.env.at("FULLBAND_ATTEMPT"), "0");
  EXPECT_EQ(spec.env.at("FULLBAND_COORDINATOR"), "localhost:1234");
  EXPECT_EQ(spec.log_dir, "/jobs/" + id);
  EXPECT_EQ(spec.env.at("FULLBAND_JOB_DIR"), "/jobs/" + id);
  EXPECT_EQ(spec.env.count("FULLBAND_TLS_CA"), 0u);  // none configured
  coordinator_->Tick();                              // no second launch
  EXPECT_EQ(launcher_.launches().size(), 1u);
}

TEST_F(CoordinatorTest, Register_MovesJobToRunningAndReturnsResumePoint) {
  const std::string id = *coordinator_->SubmitJob({"run", "alice", SmallConfig()});
  coordinator_->Tick();
  StatusOr<Registration> reg = coordinator_->RegisterWorkerGroup(id, 7, 0, 1);
  ASSERT_TRUE(reg.ok()) << reg.status().ToString();
  EXPECT_EQ(State(id), JobState::kRunning);
  EXPECT_EQ(reg->resume_step, 0);
  EXPECT_EQ(reg->total_steps, 20);
  EXPECT_EQ(reg->config, SmallConfig());
  // The same incarnation again is fine.
  EXPECT_TRUE(coordinator_->RegisterWorkerGroup(id, 7, 0, 1).ok());
}

TEST_F(CoordinatorTest, Register_BadRequests_ReturnTheirCodes) {
  const std::string id = *coordinator_->SubmitJob({"run", "alice", SmallConfig()});
  EXPECT_EQ(coordinator_->RegisterWorkerGroup(id, 7, 0, 1).status().code(),
            StatusCode::kFailedPrecondition);  // still PENDING
  coordinator_->Tick();
  EXPECT_EQ(coordinator_->RegisterWorkerGroup(id, 0, 0, 1).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(coordinator_->RegisterWorkerGroup(id, 7, 0, 4).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(coordinator_->RegisterWorkerGroup(id, 7, 1, 1).status().code(),
            StatusCode::kFailedPrecondition);  // not this attempt
  EXPECT_EQ(coordinator_->RegisterWorkerGroup("job-999999", 7, 0, 1).status().code(),
            StatusCode::kNotFound);
}

TEST_F(CoordinatorTest, Lease_RepeatedStep_ReturnsSameAssignment) {
  Config c = SmallConfig();
  c.schedule.phases = {{1.0, {{1, 0.5}, {2, 0.5}}}};
  const std::string id = StartJob(c);
  StatusOr<LeaseResult> a = coordinator_->LeaseBatches(id, 7, 0, 8);
  StatusOr<LeaseResult> b = coordinator_->LeaseBatches(id, 7, 4, 4);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->steps.size(), 8u);
  ASSERT_EQ(b->steps.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(a->steps[4 + i], b->steps[i]);
  EXPECT_EQ(a->steps[5].step, 5);
  EXPECT_EQ(a->steps[5].sampler_cursor, 20u);
  EXPECT_FALSE(a->budget_exhausted);
  EXPECT_EQ(coordinator_->GetJob(id)->leased_until, 8);
}

TEST_F(CoordinatorTest, Lease_PastTheBudget_IsTruncatedAndSaysExhausted) {
  const std::string id = StartJob();
  ASSERT_TRUE(coordinator_->LeaseBatches(id, 7, 0, 15).ok());
  StatusOr<LeaseResult> r = coordinator_->LeaseBatches(id, 7, 15, 10);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->steps.size(), 5u);
  EXPECT_TRUE(r->budget_exhausted);
  r = coordinator_->LeaseBatches(id, 7, 40, 1);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->steps.empty());
  EXPECT_TRUE(r->budget_exhausted);
  r = coordinator_->LeaseBatches(id, 7, std::numeric_limits<int64_t>::max(), 1024);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->steps.empty());
  EXPECT_EQ(coordinator_->GetJob(id)->leased_until, 20);
  // A step past the budget was never leased, whatever was asked.
  StepReport past = Report(id, 25);
  EXPECT_EQ(coordinator_->ReportStep(past).status().code(), StatusCode::kFailedPrecondition);
}

TEST_F(CoordinatorTest, Lease_BeyondTheMark_IsRefusedAndItsStepsStayUnleased) {
  const std::string id = StartJob();
  ASSERT_TRUE(coordinator_->LeaseBatches(id, 7, 0, 8).ok());
  // A gap: refused, and the steps in and after it stay unleased.
  EXPECT_EQ(coordinator_->LeaseBatches(id, 7, 12, 4).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(coordinator_->ReportStep(Report(id, 12)).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(coordinator_->ReportStep(Report(id, 10)).status().code(),
            StatusCode::kFailedPrecondition);
  // Past the budget's end: nothing leased, the mark unmoved, step 19 still never leased.
  StatusOr<LeaseResult> r = coordinator_->LeaseBatches(id, 7, 40, 5);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->steps.empty());
  EXPECT_TRUE(r->budget_exhausted);
  EXPECT_EQ(coordinator_->GetJob(id)->leased_until, 8);
  EXPECT_EQ(coordinator_->ReportStep(Report(id, 19)).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(LedgerOf(id).steps, 0);
  // Leases may start anywhere up to the mark: again from 3, and onward from 8.
  EXPECT_TRUE(coordinator_->LeaseBatches(id, 7, 3, 2).ok());
  EXPECT_TRUE(coordinator_->LeaseBatches(id, 7, 8, 4).ok());
  EXPECT_EQ(coordinator_->GetJob(id)->leased_until, 12);
  EXPECT_TRUE(coordinator_->ReportStep(Report(id, 10)).ok());
}

TEST_F(CoordinatorTest, Lease_BadRequests_ReturnTheirCodes) {
  const std::string id = StartJob();
  EXPECT_EQ(coordinator_->LeaseBatches(id, 7, -1, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(coordinator_->LeaseBatches(id, 7, 0, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(coordinator_->LeaseBatches(id, 7, 0, 1025).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(coordinator_->LeaseBatches(id, 8, 0, 1).status().code(), StatusCode::kAborted);
  EXPECT_EQ(coordinator_->LeaseBatches("nope", 7, 0, 1).status().code(), StatusCode::kNotFound);
}

TEST_F(CoordinatorTest, Report_CountsOnceAndFillsTheLedger) {
  const std::string id = StartJob();
  RunSteps(id, 0, 3);
  StatusOr<ReportResult> again = coordinator_->ReportStep(Report(id, 1));
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->duplicate);
  const Ledger l = LedgerOf(id);
  EXPECT_EQ(l.steps, 3);
  EXPECT_EQ(l.tokens, 3 * 128);
  EXPECT_EQ(l.token_equivalents, 3 * 128);
  EXPECT_GT(l.flops, 0);
  EXPECT_EQ(l.pass_histogram.at(1), 3);
  EXPECT_DOUBLE_EQ(l.step_seconds, 1.5);
  EXPECT_EQ(l.last_losses, std::vector<double>{2.5});
  EXPECT_EQ(coordinator_->GetJob(id)->budget_spent, 3 * 128);
}

TEST_F(CoordinatorTest, Report_BadRequests_ReturnTheirCodes) {
  const std::string id = StartJob();
  ASSERT_TRUE(coordinator_->LeaseBatches(id, 7, 0, 2).ok());
  EXPECT_EQ(coordinator_->ReportStep(Report(id, 2)).status().code(),
            StatusCode::kFailedPrecondition);  // never leased
  EXPECT_EQ(coordinator_->ReportStep(Report(id, 0, 8)).status().code(), StatusCode::kAborted);
  EXPECT_EQ(coordinator_->ReportStep(Report("job-000404", 0)).status().code(),
            StatusCode::kNotFound);
  StepReport r = Report(id, 0);
  r.passes = 2;
  EXPECT_EQ(coordinator_->ReportStep(r).status().code(), StatusCode::kInvalidArgument);
  r = Report(id, 0);
  r.tokens = 100;
  EXPECT_EQ(coordinator_->ReportStep(r).status().code(), StatusCode::kInvalidArgument);
  r = Report(id, 0);
  r.losses = {1, 2};
  EXPECT_EQ(coordinator_->ReportStep(r).status().code(), StatusCode::kInvalidArgument);
  r = Report(id, 0);
  r.losses = {std::nan("")};
  EXPECT_EQ(coordinator_->ReportStep(r).status().code(), StatusCode::kInvalidArgument);
  r = Report(id, 0);
  r.step_seconds = -1;
  EXPECT_EQ(coordinator_->ReportStep(r).status().code(), StatusCode::kInvalidArgument);
  r = Report(id, -3);
  EXPECT_EQ(coordinator_->ReportStep(r).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(LedgerOf(id).steps, 0);
}

TEST_F(CoordinatorTest, Budget_SpentByTheLastStep_CompletesTheJob) {
  const std::string id = StartJob();
  RunSteps(id, 0, 19);
  EXPECT_EQ(State(id), JobState::kRunning);
  ASSERT_TRUE(coordinator_->LeaseBatches(id, 7, 19, 1).ok());
  StatusOr<ReportResult> last = coordinator_->ReportStep(Report(id, 19));
  ASSERT_TRUE(last.ok());
  EXPECT_TRUE(last->job_completed);
  EXPECT_EQ(State(id), JobState::kCompleted);
  EXPECT_EQ(coordinator_->GetJob(id)->budget_spent, coordinator_->GetJob(id)->budget_amount);
  // A repeat after completion is still acknowledged, and the final checkpoint is accepted.
  StatusOr<ReportResult> repeat = coordinator_->ReportStep(Report(id, 5));
  ASSERT_TRUE(repeat.ok());
  EXPECT_TRUE(repeat->duplicate);
  EXPECT_TRUE(repeat->job_completed);
  EXPECT_TRUE(coordinator_->CommitCheckpoint(id, 7, 20, "/ckpt/step-20", 1).ok());
  EXPECT_EQ(coordinator_->Heartbeat(id, 7).value(), JobState::kCompleted);
}

TEST_F(CoordinatorTest, TokenEquivalentBudget_NeverLeasesAStepThatWouldOverrun) {
  Config c = SmallConfig();
  c.schedule.phases = {{1.0, {{3, 1.0}}}};
  c.budget.kind = BudgetKind::kTokenEquivalents;
  c.budget.amount = 128 * 3 * 4 + 300;  // four 3-pass steps; a fifth would overrun
  const std::string id = StartJob(c);
  StatusOr<LeaseResult> r = coordinator_->LeaseBatches(id, 7, 0, 10);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->steps.size(), 4u);
  for (int64_t s = 0; s < 4; ++s) {
    StepReport rep = Report(id, s);
    rep.passes = 3;
    rep.losses = {3, 2, 1};
    ASSERT_TRUE(coordinator_->ReportStep(rep).ok());
  }
  EXPECT_EQ(State(id), JobState::kCompleted);
  EXPECT_EQ(LedgerOf(id).token_equivalents, 128 * 3 * 4);
  EXPECT_EQ(LedgerOf(id).pass_histogram.at(3), 4);
}

TEST_F(CoordinatorTest, FinishedJobsToken_LastsAHeartbeatTimeoutForTheGroupToSeeTheEnd) {
  const std::string id = StartJob();
  EXPECT_EQ(launcher_.launches().back().env.at("FULLBAND_WORKER_TOKEN"), "token-" + id + "-1");
  ASSERT_TRUE(coordinator_->CancelJob(id, "enough").ok());
  EXPECT_TRUE(revoked_.empty());  // the group still has to hear of it
  EXPECT_EQ(*coordinator_->Heartbeat(id, 7), JobState::kCancelled);
  clock_.Advance(59);
  coordinator_->Tick();
  EXPECT_TRUE(revoked_.empty());
  clock_.Advance(2);
  coordinator_->Tick();
  EXPECT_EQ(revoked_, std::vector<std::string>{id});
  coordinator_->Tick();
  EXPECT_EQ(revoked_.size(), 1u);  // once
}

TEST_F(CoordinatorTest, Commit_NeedsEveryEarlierStepCounted) {
  const std::string id = StartJob();
  ASSERT_TRUE(coordinator_->LeaseBatches(id, 7, 0, 6).ok());
  for (int64_t s : {0, 1, 3}) ASSERT_TRUE(coordinator_->ReportStep(Report(id, s)).ok());
  EXPECT_EQ(coordinator_->CommitCheckpoint(id, 7, 4, "/c/4", 1).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_TRUE(coordinator_->CommitCheckpoint(id, 7, 2, "/c/2", 1).ok());
  EXPECT_EQ(coordinator_->GetJob(id)->committed_step, 2);
  EXPECT_EQ(coordinator_->GetJob(id)->checkpoint_path, "/c/2");
  EXPECT_TRUE(coordinator_->CommitCheckpoint(id, 7, 1, "/c/1", 1).ok());  // older: no-op
  EXPECT_EQ(coordinator_->GetJob(id)->committed_step, 2);
  EXPECT_EQ(coordinator_->CommitCheckpoint(id, 7, 0, "/c/0", 1).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(coordinator_->CommitCheckpoint(id, 7, 3, "", 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(coordinator_->CommitCheckpoint(id, 7, 3, "/c", 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(coordinator_->CommitCheckpoint(id, 9, 3, "/c", 1).code(), StatusCode::kAborted);
  // A report of a step before the checkpoint is a duplicate.
  EXPECT_TRUE(coordinator_->ReportStep(Report(id, 0))->duplicate);
}

TEST_F(CoordinatorTest, MissedHeartbeat_RollsBackToCheckpointAndRestartsAfterBackoff) {
  const std::string id = StartJob();
  RunSteps(id, 0, 6);
  ASSERT_TRUE(coordinator_->CommitCheckpoint(id, 7, 4, "/c/4", 1).ok());
  clock_.Advance(30);
  ASSERT_TRUE(coordinator_->Heartbeat(id, 7).ok());
  clock_.Advance(59);
  coordinator_->Tick();
  EXPECT_EQ(State(id), JobState::kRunning);  // 59 s of silence is within the deadline
  clock_.Advance(2);
  coordinator_->Tick();
  StatusOr<JobInfo> job = coordinator_->GetJob(id);
  EXPECT_EQ(job->state, JobState::kRestarting);
  EXPECT_NE(job->reason.find("no heartbeat"), std::string::npos) << job->reason;
  EXPECT_EQ(launcher_.killed(), std::vector<std::string>{"h1"});
  // Steps 4 and 5 were counted after the checkpoint: rolled back into wasted.
  EXPECT_EQ(job->ledger.steps, 4);
  EXPECT_EQ(job->ledger.tokens, 4 * 128);
  EXPECT_EQ(job->ledger.wasted_steps, 2);
  EXPECT_EQ(job->ledger.wasted_tokens, 2 * 128);
  EXPECT_EQ(job->ledger.pass_histogram.at(1), 4);
  // The old group is stale now.
  EXPECT_EQ(coordinator_->ReportStep(Report(id, 6)).status().code(), StatusCode::kAborted);
  // Back-off: 10 s before the relaunch.
  clock_.Advance(9);
  coordinator_->Tick();
  EXPECT_EQ(launcher_.launches().size(), 1u);
  clock_.Advance(2);
  coordinator_->Tick();
  ASSERT_EQ(launcher_.launches().size(), 2u);
  EXPECT_EQ(launcher_.launches()[1].attempt, 1);
  EXPECT_EQ(State(id), JobState::kLaunching);
  StatusOr<Registration> reg = coordinator_->RegisterWorkerGroup(id, 8, 1, 1);
  ASSERT_TRUE(reg.ok()) << reg.status().ToString();
  EXPECT_EQ(reg->resume_step, 4);
  EXPECT_EQ(reg->checkpoint_path, "/c/4");
  // The redone steps are counted again, once.
  RunSteps(id, 4, 6, 8);
  EXPECT_EQ(LedgerOf(id).steps, 6);
  EXPECT_EQ(coordinator_->GetJob(id)->restarts, 1);
}

TEST_F(CoordinatorTest, ReportFailure_RestartsThenFailsWhenOutOfRestarts) {
  const std::string id = StartJob();
  uint64_t inc = 7;
  for (int64_t restart = 0; restart < 2; ++restart) {
    ASSERT_TRUE(coordinator_->ReportFailure(id, inc, "NaN loss").ok());
    EXPECT_EQ(State(id), JobState::kRestarting);
    clock_.Advance(restart == 0 ? 10 : 15);  // 10 s, then min(20, max 15) s
    coordinator_->Tick();
    ASSERT_EQ(State(id), JobState::kLaunching) << restart;
    ++inc;
    ASSERT_TRUE(coordinator_->RegisterWorkerGroup(id, inc, restart + 1, 1).ok());
  }
  ASSERT_TRUE(coordinator_->ReportFailure(id, inc, "NaN loss").ok());
  StatusOr<JobInfo> job = coordinator_->GetJob(id);
  EXPECT_EQ(job->state, JobState::kFailed);
  EXPECT_EQ(job->reason, "failed after 2 restarts: worker reported: NaN loss");
  coordinator_->Tick();
  EXPECT_EQ(launcher_.killed().size(), 3u);
  EXPECT_EQ(coordinator_->ReportFailure(id, 99, "x").code(), StatusCode::kAborted);
  EXPECT_EQ(coordinator_->ReportFailure("none", 1, "x").code(), StatusCode::kNotFound);
}

// The history is every counted step with its losses, time and attempt, in pages; steps rolled
// back by a restart leave it, and the new attempt's steps take their place.
TEST_F(CoordinatorTest, History_PagesThroughCountedStepsWithTheirAttempt) {
  const double start = clock_.NowSeconds();
  const std::string id = StartJob();
  RunSteps(id, 0, 6);
  ASSERT_TRUE(coordinator_->CommitCheckpoint(id, 7, 4, "/c/4", 1).ok());
  ASSERT_TRUE(coordinator_->ReportFailure(id, 7, "rank 1 exited").ok());  // steps 4, 5 wasted
  clock_.Advance(10);
  coordinator_->Tick();
  ASSERT_TRUE(coordinator_->RegisterWorkerGroup(id, 8, 1, 1).ok());
  clock_.Advance(100);
  RunSteps(id, 4, 7, 8);
  ASSERT_TRUE(store_->WaitDurable(store_->LastAppended()).ok());

  StatusOr<HistoryPage> first = coordinator_->History(id, 0, 3);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_EQ(first->steps.size(), 3u);
  EXPECT_EQ(first->next_start_step, 3);
  StatusOr<HistoryPage> rest = coordinator_->History(id, 3, 100);
  ASSERT_TRUE(rest.ok());
  EXPECT_EQ(rest->next_start_step, -1);
  std::vector<std::pair<int64_t, StepRecord>> all = first->steps;
  all.insert(all.end(), rest->steps.begin(), rest->steps.end());
  ASSERT_EQ(all.size(), 7u);
  for (int64_t s = 0; s < 7; ++s) {
    const auto& [step, r] = all[static_cast<size_t>(s)];
    EXPECT_EQ(step, s);
    EXPECT_EQ(r.attempt, s < 4 ? 0 : 1) << s;
    EXPECT_EQ(r.unix_time, start + (s < 4 ? 0 : 110)) << s;
    EXPECT_EQ(r.tokens, 128);
    EXPECT_EQ(r.passes, 1);
    EXPECT_EQ(r.losses, std::vector<double>{2.5});
    EXPECT_EQ(r.step_seconds, 0.5);
    EXPECT_EQ(r.incarnation, s < 4 ? 7u : 8u) << s;
  }
  EXPECT_EQ(coordinator_->History(id, 7, 10)->steps.size(), 0u);
  EXPECT_EQ(coordinator_->History("job-999999", 0, 10).status().code(), StatusCode::kNotFound);
}

TEST_F(CoordinatorTest, Backoff_DoublesUpToItsCap) {
  Config c = SmallConfig();
  c.launcher.max_restarts = 5;
  c.launcher.backoff_seconds = 4;
  c.launcher.max_backoff_seconds = 10;
  const std::string id = StartJob(c);
  uint64_t inc = 7;
  for (double expected : {4.0, 8.0, 10.0}) {
    ASSERT_TRUE(coordinator_->ReportFailure(id, inc, "x").ok());
    clock_.Advance(expected - 0.5);
    coordinator_->Tick();
    EXPECT_EQ(State(id), JobState::kRestarting) << expected;
    clock_.Advance(0.5);
    coordinator_->Tick();
    EXPECT_EQ(State(id), JobState::kLaunching) << expected;
    const int64_t attempt = coordinator_->GetJob(id)->attempt;
    ASSERT_TRUE(coordinator_->RegisterWorkerGroup(id, ++inc, attempt, 1).ok());
  }
}

TEST_F(CoordinatorTest, MissedHeartbeatWithoutBackoff_IsRelaunchedInTheSameTick) {
  Config c = SmallConfig();
  c.launcher.backoff_seconds = 0;
  const std::string id = StartJob(c);
  clock_.Advance(61);
  coordinator_->Tick();
  EXPECT_EQ(State(id), JobState::kLaunching);
  ASSERT_EQ(launcher_.launches().size(), 2u);
  EXPECT_EQ(launcher_.launches()[1].attempt, 1);
  EXPECT_EQ(launcher_.killed(), std::vector<std::string>{"h1"});
}

TEST_F(CoordinatorTest, WorkerGroupExit_IsAFailure) {
  const std::string id = StartJob();
  launcher_.SetExited("h1", 3);
  coordinator_->Tick();
  StatusOr<JobInfo> job = coordinator_->GetJob(id);
  EXPECT_EQ(job->state, JobState::kRestarting);
  EXPECT_NE(job->reason.find("exit code 3"), std::string::npos) << job->reason;
}

TEST_F(CoordinatorTest, LaunchFailureOrNoRegistration_IsAFailure) {
  launcher_.FailNextLaunch(UnavailableError("mpirun not found"));
  const std::string id = *coordinator_->SubmitJob({"run", "alice", SmallConfig()});
  coordinator_->Tick();
  StatusOr<JobInfo> job = coordinator_->GetJob(id);
  EXPECT_EQ(job->state, JobState::kRestarting);
  EXPECT_NE(job->reason.find("launch failed: mpirun not found"), std::string::npos);
  clock_.Advance(10);
  coordinator_->Tick();
  EXPECT_EQ(State(id), JobState::kLaunching);
  clock_.Advance(301);
  coordinator_->Tick();
  job = coordinator_->GetJob(id);
  EXPECT_EQ(job->state, JobState::kRestarting);
  EXPECT_NE(job->reason.find("did not register"), std::string::npos);
}

// Note [Pending attempts]: time in a scheduler's queue is not launch time; the queue has its own
// limit, and the launch deadline starts when the attempt leaves it.
TEST_F(CoordinatorTest, PendingAttempt_LaunchDeadlineWaitsAndQueueLimitFails) {
  Config config = SmallConfig();
  config.launcher.slurm.pending_timeout_seconds = 1000;
  config.launcher.slurm.partition = "gpu";
  const std::string id = *coordinator_->SubmitJob({"run", "alice", config});
  coordinator_->Tick();
  ASSERT_EQ(launcher_.launches().size(), 1u);
  EXPECT_EQ(launcher_.launches()[0].slurm, config.launcher.slurm);
  launcher_.SetPending("h1", "Slurm job 5 PENDING (Resources)");
  for (int i = 0; i < 9; ++i) {  // 900 s queued: past the 300 s launch deadline, not failed
    clock_.Advance(100);
    coordinator_->Tick();
  }
  EXPECT_EQ(State(id), JobState::kLaunching);
  launcher_.SetRunning("h1");
  coordinator_->Tick();  // the launch deadline counts from when it is seen to leave the queue
  clock_.Advance(300);
  coordinator_->Tick();
  EXPECT_EQ(State(id), JobState::kLaunching);
  clock_.Advance(1);
  coordinator_->Tick();
  EXPECT_EQ(State(id), JobState::kRestarting);

  clock_.Advance(10);  // the relaunch, queued past its limit
  coordinator_->Tick();
  ASSERT_EQ(launcher_.launches().size(), 2u);
  launcher_.SetPending("h2", "Slurm job 6 PENDING (PartitionDown)");
  coordinator_->Tick();
  clock_.Advance(1001);
  coordinator_->Tick();
  StatusOr<JobInfo> job = coordinator_->GetJob(id);
  EXPECT_EQ(job->state, JobState::kRestarting);
  EXPECT_NE(job->reason.find("still queued after 1001.0 s (launcher.slurm.pending_timeout_seconds "
                             "= 1000.0): Slurm job 6 PENDING (PartitionDown)"),
            std::string::npos)
      << job->reason;
  coordinator_->Tick();
  EXPECT_EQ(launcher_.killed().back(), "h2");
}

TEST_F(CoordinatorTest, Cancel_KillsTheGroupAndIsFinal) {
  const std::string id = StartJob();
  StatusOr<JobInfo> job = coordinator_->CancelJob(id, "by alice");
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->state, JobState::kCancelled);
  EXPECT_EQ(job->reason, "by alice");
  EXPECT_TRUE(launcher_.killed().empty());  // the kill is made by the next tick
  coordinator_->Tick();
  EXPECT_EQ(launcher_.killed(), std::vector<std::string>{"h1"});
  // The proto's codes: a lease of a job that is not RUNNING is FAILED_PRECONDITION, and a
  // heartbeat answers the terminal state.
  EXPECT_EQ(coordinator_->LeaseBatches(id, 7, 0, 1).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(coordinator_->Heartbeat(id, 7).value(), JobState::kCancelled);
  EXPECT_EQ(coordinator_->Heartbeat(id, 99).value(), JobState::kCancelled);
  // Cancelling again changes nothing.
  EXPECT_EQ(coordinator_->CancelJob(id, "again")->reason, "by alice");
  EXPECT_EQ(coordinator_->CancelJob("none", "").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(coordinator_->ListJobs("", false).empty());
  EXPECT_EQ(coordinator_->ListJobs("", true).size(), 1u);
  EXPECT_TRUE(coordinator_->ListJobs("bob", true).empty());
}

TEST_F(CoordinatorTest, NewIncarnationOfTheSameAttempt_RollsBackAndTakesOver) {
  const std::string id = StartJob();
  RunSteps(id, 0, 3);
  ASSERT_TRUE(coordinator_->CommitCheckpoint(id, 7, 2, "/c/2", 1).ok());
  StatusOr<Registration> reg = coordinator_->RegisterWorkerGroup(id, 9, 0, 1);
  ASSERT_TRUE(reg.ok());
  EXPECT_EQ(reg->resume_step, 2);
  EXPECT_EQ(State(id), JobState::kRunning);
  EXPECT_EQ(LedgerOf(id).steps, 2);
  EXPECT_EQ(LedgerOf(id).wasted_steps, 1);
  EXPECT_EQ(coordinator_->Heartbeat(id, 7).status().code(), StatusCode::kAborted);
  // The new group redoes step 2 from the same lease.
  StatusOr<ReportResult> r = coordinator_->ReportStep(Report(id, 2, 9));
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->duplicate);
}

class CoordinatorRestartTest : public CoordinatorTest {
 protected:
  void SetUp() override {
    path_ = std::filesystem::temp_directory_path() /
            ("fullband-coord-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(path_);
    dir_ = path_.string();
    in_memory_ = false;
    Open();
  }
  void TearDown() override {
    coordinator_.reset();
    store_.reset();
    std::filesystem::remove_all(path_);
  }
  void Restart() {
    ASSERT_TRUE(store_->WaitDurable(store_->LastAppended()).ok());
    coordinator_.reset();
    store_.reset();
    Open();
  }
  std::filesystem::path path_;
};

TEST_F(CoordinatorRestartTest, Reopen_KeepsJobsLeasesLedgerAndCheckpoints) {
  const std::string id = StartJob();
  const std::string other = *coordinator_->SubmitJob({"second", "bob", SmallConfig()});
  RunSteps(id, 0, 5);
  ASSERT_TRUE(coordinator_->CommitCheckpoint(id, 7, 3, "/c/3", 2).ok());
  ASSERT_TRUE(coordinator_->LeaseBatches(id, 7, 5, 3).ok());
  const JobInfo before = *coordinator_->GetJob(id);
  Restart();
  const JobInfo after = *coordinator_->GetJob(id);
  EXPECT_EQ(after.state, JobState::kRunning);
  EXPECT_EQ(after.ledger.steps, before.ledger.steps);
  EXPECT_EQ(after.ledger.tokens, before.ledger.tokens);
  EXPECT_EQ(after.ledger.pass_histogram, before.ledger.pass_histogram);
  EXPECT_EQ(after.committed_step, 3);
  EXPECT_EQ(after.checkpoint_path, "/c/3");
  EXPECT_EQ(after.leased_until, 8);
  EXPECT_EQ(after.spec.config, before.spec.config);
  EXPECT_EQ(State(other), JobState::kPending);
  // The running job continues: counted steps stay counted, leased steps can be reported.
  EXPECT_TRUE(coordinator_->ReportStep(Report(id, 4))->duplicate);
  EXPECT_TRUE(coordinator_->ReportStep(Report(id, 1))->duplicate);
  StatusOr<ReportResult> r = coordinator_->ReportStep(Report(id, 6));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->duplicate);
  EXPECT_EQ(LedgerOf(id).steps, 6);
  // New ids continue after the loaded ones.
  EXPECT_EQ(*coordinator_->SubmitJob({"third", "alice", SmallConfig()}), "job-000003");
  // A rollback after the restart uses the reloaded step records.
  ASSERT_TRUE(coordinator_->ReportFailure(id, 7, "x").ok());
  EXPECT_EQ(LedgerOf(id).steps, 3);
  EXPECT_EQ(LedgerOf(id).wasted_steps, 3);  // steps 3, 4 and 6
  Restart();
  EXPECT_EQ(State(id), JobState::kRestarting);
  EXPECT_EQ(LedgerOf(id).steps, 3);
  EXPECT_EQ(LedgerOf(id).wasted_steps, 3);
}

TEST_F(CoordinatorRestartTest, Reopen_GivesRunningJobsAFreshHeartbeatDeadline) {
  const std::string id = StartJob();
  clock_.Advance(50);
  Restart();
  clock_.Advance(50);
  coordinator_->Tick();
  EXPECT_EQ(State(id), JobState::kRunning);
  clock_.Advance(11);
  coordinator_->Tick();
  EXPECT_EQ(State(id), JobState::kRestarting);
}

TEST_F(CoordinatorRestartTest, Submit_SameRequestId_ReturnsTheFirstJobAcrossRestarts) {
  const JobSpec spec{"first", "alice", SmallConfig()};
  const std::string id = *coordinator_->SubmitJob(spec, "req-1");
  EXPECT_EQ(*coordinator_->SubmitJob(spec, "req-1"), id);  // a retry
  EXPECT_NE(*coordinator_->SubmitJob(spec, "req-2"), id);
  EXPECT_NE(*coordinator_->SubmitJob({"first", "bob", SmallConfig()}, "req-1"), id);  // bob's
  EXPECT_NE(*coordinator_->SubmitJob(spec, ""), id);                                  // no id
  JobSpec other = spec;
  other.config.data.batch_size = 8;
  const Status s = coordinator_->SubmitJob(other, "req-1").status();
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists);
  EXPECT_NE(s.message().find(id), std::string::npos) << s.message();
  Restart();
  EXPECT_EQ(*coordinator_->SubmitJob(spec, "req-1"), id);
  EXPECT_EQ(coordinator_->ListJobs("", true).size(), 4u);
}

TEST_F(CoordinatorRestartTest, Store_KeepsTokenDigestsOnlyInAnOwnerOnlyDirectory) {
  const std::string id = StartJob();
  const std::string token = launcher_.launches().back().env.at("FULLBAND_WORKER_TOKEN");
  ASSERT_EQ(token, "token-" + id + "-1");
  Restart();
  EXPECT_EQ(restored_, (std::vector<std::pair<std::string, std::string>>{{id, "sha-1"}}));
  namespace fs = std::filesystem;
  EXPECT_EQ(fs::status(path_).permissions() & fs::perms::all, fs::perms::owner_all);
  int files = 0;
  for (const auto& e : fs::recursive_directory_iterator(path_)) {
    if (!e.is_regular_file()) continue;
    ++files;
    EXPECT_EQ(e.status().permissions() & (fs::perms::group_all | fs::perms::others_all),
              fs::perms::none)
        << e.path();
    std::ifstream in(e.path(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), {});
    EXPECT_EQ(bytes.find(token), std::string::npos) << "the token rests in " << e.path();
  }
  EXPECT_GT(files, 3);
}

TEST_F(CoordinatorRestartTest, CorruptStoreRecords_AreDataLossNamingTheRecord) {
  const std::string id = StartJob();
  RunSteps(id, 0, 3);
  ASSERT_TRUE(store_->WaitDurable(store_->LastAppended()).ok());
  coordinator_.reset();
  // Each damage on its own, undone after: loading must be DATA_LOSS naming what is wrong.
  std::string state, spec;
  ASSERT_TRUE(store_
                  ->Scan("job/" + id + "/",
                         [&](std::string_view key, std::string_view value) {
                           (key.ends_with("/state") ? state : spec) = std::string(value);
                           return OkStatus();
                         })
                  .ok());
  const auto load_with = [&](WriteSet damage, WriteSet repair) {
    EXPECT_TRUE(store_->WaitDurable(store_->Append(std::move(damage))).ok());
    StatusOr<std::unique_ptr<Coordinator>> c = Coordinator::Create(
        CoordinatorOptions(), &clock_, {{LauncherKind::kLocal, &launcher_}}, store_.get());
    EXPECT_TRUE(store_->WaitDurable(store_->Append(std::move(repair))).ok());
    EXPECT_EQ(c.status().code(), StatusCode::kDataLoss) << c.status().ToString();
    return c.status().message();
  };
  const std::string state_key = "job/" + id + "/state", spec_key = "job/" + id + "/spec";
  WriteSet restore;
  restore.puts = {{state_key, state}, {spec_key, spec}};
  EXPECT_NE(
      load_with({{{state_key, "\xff\xff"}}, {}}, restore).find("unreadable record " + state_key),
      std::string::npos);
  EXPECT_NE(load_with({{}, {state_key}}, restore).find("job " + id + ": no state record"),
            std::string::npos);
  proto::StoredJobState bad_state;
  ASSERT_TRUE(bad_state.ParseFromString(state));
  bad_state.set_state(static_cast<proto::JobState>(42));
  EXPECT_NE(load_with({{{state_key, bad_state.SerializeAsString()}}, {}}, restore)
                .find("job " + id + ": "),
            std::string::npos);
  proto::StoredJobSpec bad_spec;
  ASSERT_TRUE(bad_spec.ParseFromString(spec));
  bad_spec.mutable_spec()->mutable_config()->mutable_model()->set_n_kv_heads(3);
  EXPECT_NE(load_with({{{spec_key, bad_spec.SerializeAsString()}}, {}}, restore).find("n_kv_heads"),
            std::string::npos);
  std::string step_key = "step/" + id + "/";  // step 100, big-endian
  step_key.append(7, '\0');
  step_key.push_back('d');
  WriteSet drop;
  drop.deletes = {step_key};
  EXPECT_NE(load_with({{{step_key, "\xff\xff"}}, {}}, drop).find("unreadable step record"),
            std::string::npos);
  // Restored, it loads.
  EXPECT_TRUE(Coordinator::Create(CoordinatorOptions(), &clock_,
                                  {{LauncherKind::kLocal, &launcher_}}, store_.get())
                  .ok());
}

TEST_F(CoordinatorRestartTest, StoreOfAnotherFormatVersion_IsDataLoss) {
  coordinator_.reset();
  proto::StoreMeta meta;
  meta.set_magic("fullband-coordinator");
  meta.set_version(1);
  WriteSet w;
  w.puts = {{"meta", meta.SerializeAsString()}};
  ASSERT_TRUE(store_->WaitDurable(store_->Append(std::move(w))).ok());
  store_.reset();
  const Status s = Store::Open(path_.string()).status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("store format version 1, this coordinator reads version 2"),
            std::string::npos)
      << s.message();
}

// The restart fixture with its store on a FaultFileSystem.
class CoordinatorFaultTest : public CoordinatorRestartTest {
 protected:
  void SetUp() override {
    file_system_ = faults_;
    CoordinatorRestartTest::SetUp();
  }
  std::shared_ptr<testing::FaultFileSystem> faults_ = std::make_shared<testing::FaultFileSystem>();
};

// Power loss, not a process kill: what was not synced is gone (FaultFileSystem). Every step
// whose report was acknowledged as durable is still counted after it.
TEST_F(CoordinatorFaultTest, PowerLoss_KeepsEveryAcknowledgedReport) {
  const std::string id = StartJob();
  ASSERT_TRUE(coordinator_->LeaseBatches(id, 7, 0, 12).ok());
  for (int64_t s = 0; s < 12; ++s) {
    ASSERT_TRUE(coordinator_->ReportStep(Report(id, s)).ok());
    // Acknowledged (the RPC answers) only once durable.
    ASSERT_TRUE(store_->WaitDurable(store_->LastAppended()).ok());
  }
  faults_->StopWrites();  // the power goes
  coordinator_.reset();
  store_.reset();
  faults_->DropUnsynced();
  faults_->ResumeWrites();
  Open();
  ASSERT_TRUE(coordinator_->GetJob(id).ok()) << "the acknowledged job is gone";
  EXPECT_EQ(LedgerOf(id).steps, 12);
  EXPECT_EQ(LedgerOf(id).tokens, 12 * 128);
  EXPECT_TRUE(coordinator_->ReportStep(Report(id, 11))->duplicate);
}

TEST_F(CoordinatorFaultTest, FailedStoreWrite_IsUnavailableAndNothingMoreIsAcknowledged) {
  const std::string id = StartJob();
  ASSERT_TRUE(coordinator_->LeaseBatches(id, 7, 0, 4).ok());
  ASSERT_TRUE(coordinator_->ReportStep(Report(id, 0)).ok());
  ASSERT_TRUE(store_->WaitDurable(store_->LastAppended()).ok());
  faults_->StopWrites();  // ENOSPC from here on
  ASSERT_TRUE(coordinator_->ReportStep(Report(id, 1)).ok());
  const Status s = store_->WaitDurable(store_->LastAppended());
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("coordinator store write failed"), std::string::npos);
  faults_->ResumeWrites();  // a failed write is sticky: the memory is ahead of the disk
  ASSERT_TRUE(coordinator_->ReportStep(Report(id, 2)).ok());
  EXPECT_EQ(store_->WaitDurable(store_->LastAppended()).code(), StatusCode::kUnavailable);
}

TEST_F(CoordinatorRestartTest, RollBackCheckpoint_MovesStepsSinceTheOlderOneToWasted) {
  const std::string id = StartJob();
  RunSteps(id, 0, 7);
  ASSERT_TRUE(coordinator_->CommitCheckpoint(id, 7, 2, "/c/step-2", 1).ok());
  ASSERT_TRUE(coordinator_->CommitCheckpoint(id, 7, 5, "/c/step-5", 1).ok());
  // The group found step-5 corrupt and restarted from step-2; step 6 was counted after step-5.
  EXPECT_EQ(coordinator_->RollBackCheckpoint(id, 7, 5, "/c/step-5", "x").code(),
            StatusCode::kFailedPrecondition);  // not before the committed one
  EXPECT_EQ(coordinator_->RollBackCheckpoint(id, 7, 2, "", "x").code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(coordinator_->RollBackCheckpoint(id, 9, 2, "/c/step-2", "x").code(),
            StatusCode::kAborted);
  ASSERT_TRUE(coordinator_->RollBackCheckpoint(id, 7, 2, "/c/step-2", "step-5 corrupt").ok());
  const auto check = [&] {
    const JobInfo job = *coordinator_->GetJob(id);
    EXPECT_EQ(job.committed_step, 2);
    EXPECT_EQ(job.checkpoint_path, "/c/step-2");
    EXPECT_EQ(job.ledger.steps, 2);
    EXPECT_EQ(job.ledger.tokens, 2 * 128);
    EXPECT_EQ(job.ledger.wasted_steps, 5);  // steps 2..6
    EXPECT_EQ(job.ledger.wasted_tokens, 5 * 128);
  };
  check();
  Restart();  // the rollback is durable, and the rolled-back step records are gone
  check();
  // Steps 2.. are counted again as the group redoes them.
  StatusOr<ReportResult> r = coordinator_->ReportStep(Report(id, 2));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->duplicate);
  EXPECT_EQ(LedgerOf(id).steps, 3);
  // Back to scratch: step 0 and no path.
  ASSERT_TRUE(coordinator_->RollBackCheckpoint(id, 7, 0, "", "step-2 corrupt").ok());
  EXPECT_EQ(LedgerOf(id).steps, 0);
  EXPECT_EQ(coordinator_->GetJob(id)->checkpoint_path, "");
}

// The wire's Job is JobInfo by reflection: every field of proto::Job comes back.
TEST(ProtoConvert, Job_RoundTripPreservesEveryField) {
  testing::ExpectEveryFieldRoundTrips<proto::Job>([](const proto::Job& every) {
    JobInfo info;
    const Status read = ProtoToStruct(every, info);
    EXPECT_TRUE(read.ok()) << read.ToString();
    proto::Job back;
    ToProto(info, &back);
    return back;
  });
}

// One name table spells each state for errors and metrics, and for the wire.
TEST(ProtoConvert, JobState_NamesMatchTheWire) {
  EXPECT_EQ(JobStateName(JobState::kRestarting), "RESTARTING");
  EXPECT_EQ(ToProto(JobState::kPending), proto::JOB_STATE_PENDING);
  EXPECT_EQ(ToProto(JobState::kLaunching), proto::JOB_STATE_LAUNCHING);
  EXPECT_EQ(ToProto(JobState::kRunning), proto::JOB_STATE_RUNNING);
  EXPECT_EQ(ToProto(JobState::kRestarting), proto::JOB_STATE_RESTARTING);
  EXPECT_EQ(ToProto(JobState::kCompleted), proto::JOB_STATE_COMPLETED);
  EXPECT_EQ(ToProto(JobState::kFailed), proto::JOB_STATE_FAILED);
  EXPECT_EQ(ToProto(JobState::kCancelled), proto::JOB_STATE_CANCELLED);
}

}  // namespace
}  // namespace fullband::coordinator

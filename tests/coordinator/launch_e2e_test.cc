// End to end on loopback: the coordinator service with the real local launcher starts
// fake_worker processes (the test double of a worker, on the client library) over TLS with
// minted worker tokens; jobs run to completion, and injected failures (a reported failure, a
// crash) are restarted from the last checkpoint with the redone steps counted as wasted.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "coordinator/client.h"
#include "coordinator/local_launcher.h"
#include "coordinator/service.h"
#include "proto/config_convert.h"
#include "tests/coordinator/fakes.h"

namespace fullband::coordinator {
namespace {

const char kAlice[] = "alice-token-0123456789abcdef0123456789abcdef";

// The local launcher, remembering its handles. A job is COMPLETED once its last step is
// counted, and its worker commits the last checkpoint after that; a test that checks the
// checkpoint waits for the attempts to exit first.
class RecordingLauncher final : public Launcher {
 public:
  explicit RecordingLauncher(const LocalLauncherOptions& options) : local_(options) {}
  std::string_view name() const override { return local_.name(); }
  StatusOr<std::string> Launch(const LaunchSpec& spec) override {
    StatusOr<std::string> handle = local_.Launch(spec);
    if (handle.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      handles_.push_back(*handle);
    }
    return handle;
  }
  StatusOr<LaunchState> Poll(const std::string& handle) override { return local_.Poll(handle); }
  Status Kill(const std::string& handle) override { return local_.Kill(handle); }

  // Blocks until every attempt launched so far has exited (at most 60 s each).
  void WaitForExits() {
    std::vector<std::string> handles;
    {
      std::lock_guard<std::mutex> lock(mu_);
      handles = handles_;
    }
    for (const std::string& h : handles) {
      StatusOr<LaunchState> state = local_.Wait(h, std::chrono::seconds(60));
      ASSERT_TRUE(state.ok()) << state.status().ToString();
      ASSERT_NE(state->phase, LaunchState::Phase::kRunning) << "attempt " << h << " still running";
    }
  }

 private:
  LocalLauncher local_;
  std::mutex mu_;
  std::vector<std::string> handles_;
};

class LaunchE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("fullband-e2e-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    const std::string d = dir_.string();
    const std::string cmd =
        std::string(FULLBAND_GEN_CERTS_SCRIPT) + " --dir " + d + "/tls --days 2 > /dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
    std::ofstream(d + "/tokens.yaml")
        << "version: 1\ntokens:\n  - {token: " << kAlice << ", role: user, user: alice}\n";
    std::filesystem::permissions(d + "/tokens.yaml", std::filesystem::perms::owner_read |
                                                         std::filesystem::perms::owner_write);
    ServiceConfig config;
    config.listen = "127.0.0.1:0";
    config.store_dir = d + "/store";
    config.jobs_dir = d + "/jobs";
    config.tls_cert = d + "/tls/server.crt";
    config.worker_tls_ca = d + "/tls/ca.crt";
    config.tls_key = d + "/tls/server.key";
    config.tokens_file = d + "/tokens.yaml";
    config.tick_seconds = 0.05;
    config.heartbeat_interval_seconds = 0.5;
    config.heartbeat_timeout_seconds = 30;  // failures here are exits, not silence
    config.direct_single_process = true;
    config.kill_grace_seconds = 1;
    launcher_ = std::make_unique<RecordingLauncher>(LocalLauncherOptionsFor(config));
    auto service = CoordinatorService::Start(config, launcher_.get());
    ASSERT_TRUE(service.ok()) << service.status().ToString();
    service_ = std::move(*service);
    ClientOptions o;
    o.address = "127.0.0.1:" + std::to_string(service_->port());
    o.token = kAlice;
    o.tls_ca_file = d + "/tls/ca.crt";
    auto jobs = JobClient::Connect(o);
    ASSERT_TRUE(jobs.ok());
    jobs_ = std::move(*jobs);
  }
  void TearDown() override {
    jobs_.reset();
    service_.reset();
    launcher_.reset();
    std::filesystem::remove_all(dir_);
  }

  // Runs a 20-step job of fake_worker with `args` and returns it once it is finished.
  proto::Job Run(const std::vector<std::string>& args, int64_t dp = 1) {
    Config c = SmallTestConfig();
    c.parallel.dp = dp;
    c.launcher.command = {FULLBAND_FAKE_WORKER,    "--step-ms", "2",
                          "--checkpoint-every",    "5",         "--ckpt-dir",
                          (dir_ / "ckpt").string()};
    c.launcher.extra_args = args;
    c.launcher.backoff_seconds = 0.2;
    c.launcher.max_restarts = 2;
    proto::JobSpec spec;
    spec.set_name("e2e");
    *spec.mutable_config() = ToProto(c);
    StatusOr<std::string> id = jobs_->Submit(spec);
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    proto::Job last;
    const Status s = jobs_->Watch(
        *id,
        [&](const proto::Job& job) {
          last = job;
          return true;
        },
        std::chrono::minutes(2));
    EXPECT_TRUE(s.ok()) << s.ToString();
    return last;
  }

  std::filesystem::path dir_;
  std::unique_ptr<RecordingLauncher> launcher_;  // outlives service_
  std::unique_ptr<CoordinatorService> service_;
  std::unique_ptr<JobClient> jobs_;
};

TEST_F(LaunchE2eTest, FakeWorker_RunsTheJobToCompletion) {
  const proto::Job completed = Run({});
  EXPECT_EQ(completed.state(), proto::JOB_STATE_COMPLETED) << completed.reason();
  launcher_->WaitForExits();
  StatusOr<proto::Job> got = jobs_->Get(completed.id());
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  const proto::Job& job = *got;
  EXPECT_EQ(job.state(), proto::JOB_STATE_COMPLETED);
  EXPECT_EQ(job.ledger().steps(), 20);
  EXPECT_EQ(job.ledger().tokens(), 20 * 128);
  EXPECT_EQ(job.ledger().wasted_steps(), 0);
  EXPECT_EQ(job.restarts(), 0);
  EXPECT_EQ(job.committed_step(), 20);
  EXPECT_TRUE(std::filesystem::exists(dir_ / "ckpt" / job.id() / "step-20" / "manifest.json"));
  EXPECT_TRUE(std::filesystem::exists(dir_ / "jobs" / job.id() / "attempt-0.out"));
}

TEST_F(LaunchE2eTest, TwoRanksUnderMpirun_RunTheJobToCompletion) {
  const proto::Job job = Run({}, /*dp=*/2);
  EXPECT_EQ(job.state(), proto::JOB_STATE_COMPLETED) << job.reason();
  EXPECT_EQ(job.ledger().steps(), 20);
  EXPECT_EQ(job.restarts(), 0);
  std::ifstream err(dir_ / "jobs" / job.id() / "attempt-0.err");
  std::string first_line;
  std::getline(err, first_line);
  EXPECT_NE(first_line.find("mpirun"), std::string::npos) << first_line;
}

TEST_F(LaunchE2eTest, ReportedFailure_RestartsFromTheCheckpoint) {
  const proto::Job job = Run({"--fail-at-step", "12"});
  EXPECT_EQ(job.state(), proto::JOB_STATE_COMPLETED) << job.reason();
  EXPECT_EQ(job.restarts(), 1);
  EXPECT_EQ(job.attempt(), 1);
  EXPECT_EQ(job.ledger().steps(), 20);
  EXPECT_EQ(job.ledger().wasted_steps(), 2);  // steps 10 and 11, after the checkpoint at 10
  EXPECT_EQ(job.ledger().wasted_tokens(), 2 * 128);
}

TEST_F(LaunchE2eTest, CrashedWorker_IsDetectedAndRestarted) {
  const proto::Job job = Run({"--crash-at-step", "7"});
  EXPECT_EQ(job.state(), proto::JOB_STATE_COMPLETED) << job.reason();
  EXPECT_EQ(job.restarts(), 1);
  EXPECT_EQ(job.ledger().steps(), 20);
  EXPECT_EQ(job.ledger().wasted_steps(), 2);  // steps 5 and 6
}

TEST_F(LaunchE2eTest, WorkerThatAlwaysFails_EndsFailedWithTheReason) {
  const proto::Job job = Run({"--fail-at-step", "3", "--faulty-attempts", "99"});
  EXPECT_EQ(job.state(), proto::JOB_STATE_FAILED);
  EXPECT_EQ(job.restarts(), 2);
  EXPECT_NE(job.reason().find("injected failure at step 3"), std::string::npos) << job.reason();
}

}  // namespace
}  // namespace fullband::coordinator

// Kill -9 of the real coordinator process during a stream of step reports: after a restart on
// the same store every acknowledged report is still counted (a repeat is a duplicate), the
// reports in flight at the crash are re-sent as a worker would, and the ledger then holds
// each reported step exactly once.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

#include "coordinator/client.h"
#include "proto/config_convert.h"
#include "proto/coordinator.grpc.pb.h"
#include "tests/coordinator/fakes.h"

namespace fullband::coordinator {
namespace {

constexpr uint64_t kIncarnation = 42;
constexpr int kThreads = 16;

class CoordinatorProcess {
 public:
  CoordinatorProcess(const std::string& config_path) {
    int out[2];
    FB_CHECK(pipe(out) == 0);
    pid_ = fork();
    FB_CHECK(pid_ >= 0);
    if (pid_ == 0) {
      dup2(out[1], STDOUT_FILENO);
      close(out[0]);
      close(out[1]);
      execl(FULLBAND_SERVE_COORDINATOR, FULLBAND_SERVE_COORDINATOR, config_path.c_str(),
            static_cast<char*>(nullptr));
      _exit(127);
    }
    close(out[1]);
    FILE* in = fdopen(out[0], "r");
    if (std::fscanf(in, "port %d", &port_) != 1) port_ = 0;
    std::fclose(in);
  }
  ~CoordinatorProcess() {
    if (pid_ > 0) Kill(SIGTERM);
  }
  void Kill(int signal) {
    kill(pid_, signal);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }
  int port() const { return port_; }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
};

constexpr int64_t kSteps = 8192;

std::chrono::system_clock::time_point Deadline() {
  return std::chrono::system_clock::now() + std::chrono::seconds(10);
}

// The coordinator process on a store in a fresh directory, with one job whose worker group is
// the test itself.
class CrashE2e : public ::testing::Test {
 protected:
  CrashE2e()
      : dir_(std::filesystem::temp_directory_path() /
             ("fullband-crash-" + std::to_string(::getpid()))),
        config_path_((dir_ / "coordinator.yaml").string()) {}

  // Writes the coordinator's config, starts it and submits the job (launched by a sleep, so
  // that the test can be its worker group); returns when the job is launched.
  void StartCoordinatorAndJob() {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    std::ofstream(config_path_) << "listen: 127.0.0.1:0\nstore_dir: " << (dir_ / "store").string()
                                << "\njobs_dir: " << (dir_ / "jobs").string()
                                << "\ntick_seconds: 0.05\ndirect_single_process: true\n"
                                << "kill_grace_seconds: 1\n";
    Config job_config = SmallTestConfig();
    job_config.budget.amount = 128.0 * 1'000'000;
    job_config.launcher.command = {"/bin/sleep", "600"};  // the test itself is the worker group
    options_.max_attempts = 1;
    options_.rpc_timeout_seconds = 10;
    ASSERT_NO_FATAL_FAILURE(StartProcess());
    auto jobs = JobClient::Connect(options_);
    ASSERT_TRUE(jobs.ok());
    proto::JobSpec spec;
    spec.set_name("crash");
    *spec.mutable_config() = ToProto(job_config);
    StatusOr<std::string> id = (*jobs)->Submit(spec);
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    job_id_ = *id;
    ASSERT_EQ(
        (*jobs)
            ->Watch(job_id_,
                    [](const proto::Job& j) { return j.state() != proto::JOB_STATE_LAUNCHING; })
            .code(),
        StatusCode::kCancelled);
  }

  // (Re)starts the coordinator process on the same config and store; options_ and stub_ then
  // reach it.
  void StartProcess() {
    process_.reset();
    process_ = std::make_unique<CoordinatorProcess>(config_path_);
    ASSERT_GT(process_->port(), 0);
    options_.address = "127.0.0.1:" + std::to_string(process_->port());
    stub_ = proto::WorkerService::NewStub(*MakeChannel(options_));
  }

  // Registers the worker group and leases the job's first kSteps steps.
  void RegisterAndLease() {
    {
      grpc::ClientContext c;
      proto::RegisterWorkerGroupRequest req;
      req.set_job_id(job_id_);
      req.set_incarnation(kIncarnation);
      req.set_world_size(1);
      proto::RegisterWorkerGroupResponse resp;
      ASSERT_TRUE(stub_->RegisterWorkerGroup(&c, req, &resp).ok());
    }
    for (int64_t from = 0; from < kSteps; from += 1024) {
      grpc::ClientContext c;
      c.set_deadline(Deadline());
      proto::LeaseBatchesRequest req;
      req.set_job_id(job_id_);
      req.set_incarnation(kIncarnation);
      req.set_from_step(from);
      req.set_count(1024);
      proto::LeaseBatchesResponse resp;
      ASSERT_TRUE(stub_->LeaseBatches(&c, req, &resp).ok());
    }
  }

  grpc::Status Report(int64_t step, proto::ReportStepResponse* resp) {
    grpc::ClientContext c;
    c.set_deadline(Deadline());
    proto::ReportStepRequest req;
    req.set_job_id(job_id_);
    req.set_incarnation(kIncarnation);
    req.set_step(step);
    req.set_tokens(128);
    req.set_passes(1);
    req.add_losses(2.0);
    return stub_->ReportStep(&c, req, resp);
  }

  // A stream of reports from kThreads threads, each its share of the steps in order, until
  // the coordinator is killed with SIGKILL under them after 2,000 acknowledgements. Fills
  // acked_ and unacked_ (the reports in flight at the kill, to be re-sent).
  void StreamUntilKilled() {
    std::mutex mu;
    std::atomic<int64_t> ack_count{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int64_t step = t; step < kSteps; step += kThreads) {
          proto::ReportStepResponse resp;
          const grpc::Status s = Report(step, &resp);
          std::lock_guard<std::mutex> lock(mu);
          if (s.ok()) {
            acked_.insert(step);
            ++ack_count;
          } else {
            unacked_.insert(step);  // in flight when the coordinator died: to be re-sent
            return;
          }
        }
      });
    }
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::minutes(2);
    while (ack_count.load() < 2000 && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::yield();
    }
    ASSERT_GE(ack_count.load(), 2000) << "2000 reports not acknowledged within 2 minutes";
    process_->Kill(SIGKILL);
    for (auto& th : threads) th.join();
  }

  const std::filesystem::path dir_;
  const std::string config_path_;
  std::unique_ptr<CoordinatorProcess> process_;
  ClientOptions options_;
  std::string job_id_;
  std::unique_ptr<proto::WorkerService::Stub> stub_;
  std::set<int64_t> acked_, unacked_;
};

TEST_F(CrashE2e, KillDashNine_LosesNoAcknowledgedReportAndCountsNoneTwice) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinatorAndJob());
  ASSERT_NO_FATAL_FAILURE(RegisterAndLease());
  ASSERT_NO_FATAL_FAILURE(StreamUntilKilled());
  ASSERT_GE(acked_.size(), 2000u);
  ASSERT_LT(acked_.size(), static_cast<size_t>(kSteps)) << "the kill came after the stream";
  std::printf("killed after %zu acknowledged reports, %zu in flight\n", acked_.size(),
              unacked_.size());

  ASSERT_NO_FATAL_FAILURE(StartProcess());
  // Every acknowledged report survived: repeating it is a duplicate.
  for (int64_t step : acked_) {
    proto::ReportStepResponse resp;
    ASSERT_TRUE(Report(step, &resp).ok()) << step;
    ASSERT_TRUE(resp.duplicate()) << "acknowledged step " << step << " was lost";
  }
  // The worker re-sends what was not acknowledged; each is counted at most once.
  for (int64_t step : unacked_) {
    proto::ReportStepResponse resp;
    ASSERT_TRUE(Report(step, &resp).ok()) << step;
  }
  auto jobs = JobClient::Connect(options_);
  StatusOr<proto::Job> job = (*jobs)->Get(job_id_);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->ledger().steps(), static_cast<int64_t>(acked_.size() + unacked_.size()));
  EXPECT_EQ(job->ledger().tokens(), 128 * static_cast<int64_t>(acked_.size() + unacked_.size()));
  EXPECT_EQ(job->state(), proto::JOB_STATE_RUNNING);
  ASSERT_TRUE((*jobs)->Cancel(job_id_, "test over").ok());  // also ends the sleep
  process_.reset();
  std::filesystem::remove_all(dir_);
}

}  // namespace
}  // namespace fullband::coordinator

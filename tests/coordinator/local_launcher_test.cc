// Tests of coordinator/local_launcher.h with `sh -c` scripts run directly or through a fake
// mpirun script (no MPI needed): exit codes, logs, Kill of whole sessions, errors.
#include "coordinator/local_launcher.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "coordinator/metrics_http.h"
#include "tests/coordinator/launcher_test_util.h"

namespace fullband::coordinator {
namespace {

using std::chrono::milliseconds;
using testing::ReadFile;
using testing::Running;
using Phase = LaunchState::Phase;

pid_t PidOf(const std::string& handle) { return static_cast<pid_t>(std::stoll(handle)); }

class LocalLauncherTest : public testing::TempDirTest {
 protected:
  LaunchSpec Spec(const std::string& script, int64_t attempt = 0) {
    LaunchSpec spec;
    spec.job_id = "job-1";
    spec.attempt = attempt;
    spec.processes = 1;
    spec.command = {"sh", "-c", script};
    spec.log_dir = (dir_ / "logs").string();
    return spec;
  }

  static LocalLauncherOptions Direct(milliseconds grace = milliseconds(5000)) {
    LocalLauncherOptions options;
    options.direct_single_process = true;
    options.mpirun = "/nonexistent/mpirun";  // never used for one process
    options.kill_grace = grace;
    return options;
  }

  // A FIFO the script writes to; reading it waits until the script has reached that point.
  std::string MakeFifo() {
    const std::string path = (dir_ / "ready").string();
    EXPECT_EQ(mkfifo(path.c_str(), 0600), 0);
    return path;
  }
  static std::string ReadFifo(const std::string& path) { return ReadFile(path); }
};

TEST_F(LocalLauncherTest, Launch_ExitZero_IsExitedWithCodeZeroAndReaped) {
  LocalLauncher launcher(Direct());
  auto handle = launcher.Launch(Spec("exit 0"));
  ASSERT_TRUE(handle.ok()) << handle.status().ToString();
  auto state = launcher.Wait(*handle, milliseconds(30'000));
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->phase, Phase::kExited);
  EXPECT_EQ(state->exit_code, 0);
  EXPECT_FALSE(std::filesystem::exists("/proc/" + std::to_string(PidOf(*handle)))) << "not reaped";
  auto again = launcher.Poll(*handle);  // the final state stays
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->phase, Phase::kExited);
}

TEST_F(LocalLauncherTest, Launch_ExitThree_IsExitedWithCodeThree) {
  LocalLauncher launcher(Direct());
  auto handle = launcher.Launch(Spec("exit 3"));
  ASSERT_TRUE(handle.ok());
  auto state = launcher.Wait(*handle, milliseconds(30'000));
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->phase, Phase::kExited);
  EXPECT_EQ(state->exit_code, 3);
  EXPECT_EQ(state->detail, "exited with code 3");
}

// A group that ends before its rank 0 could report why: its last error line says.
TEST_F(LocalLauncherTest, Launch_FailedExit_DetailQuotesTheLastErrorLine) {
  LocalLauncher launcher(Direct());
  auto handle = launcher.Launch(
      Spec("echo 'fullband worker: rank 0: earlier' >&2; echo noise >&2; "
           "echo 'fullband worker: rank 1: INTERNAL: cannot write x: No space left' >&2; "
           "echo done >&2; exit 1"));
  ASSERT_TRUE(handle.ok());
  auto state = launcher.Wait(*handle, milliseconds(30'000));
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->detail,
            "exited with code 1; last error: fullband worker: rank 1: INTERNAL: cannot write x: "
            "No space left");
}

TEST_F(LocalLauncherTest, Launch_WritesStdoutAndStderrToTheAttemptsFiles) {
  LocalLauncher launcher(Direct());
  auto handle = launcher.Launch(Spec("echo out; echo err >&2; read x || echo stdin-empty", 4));
  ASSERT_TRUE(handle.ok());
  ASSERT_EQ(launcher.Wait(*handle, milliseconds(30'000))->phase, Phase::kExited);
  EXPECT_EQ(ReadFile((dir_ / "logs/attempt-4.out").string()), "out\nstdin-empty\n");
  const std::string err = ReadFile((dir_ / "logs/attempt-4.err").string());
  EXPECT_EQ(err.rfind("fullband: job job-1 attempt 4: sh -c", 0), 0u) << err;
  EXPECT_EQ(err.substr(err.size() - 4), "err\n");
}

TEST_F(LocalLauncherTest, Launch_SameAttemptAgain_AppendsToItsLogs) {
  LocalLauncher launcher(Direct());
  for (int i = 0; i < 2; ++i) {
    auto handle = launcher.Launch(Spec("echo run"));
    ASSERT_TRUE(handle.ok());
    ASSERT_EQ(launcher.Wait(*handle, milliseconds(30'000))->phase, Phase::kExited);
  }
  EXPECT_EQ(ReadFile((dir_ / "logs/attempt-0.out").string()), "run\nrun\n");
}

TEST_F(LocalLauncherTest, Launch_SpecEnv_ReachesTheCommand) {
  LocalLauncher launcher(Direct());
  LaunchSpec spec = Spec("echo \"$FULLBAND_TEST_VALUE\"");
  spec.env["FULLBAND_TEST_VALUE"] = "hello world";
  auto handle = launcher.Launch(spec);
  ASSERT_TRUE(handle.ok());
  ASSERT_EQ(launcher.Wait(*handle, milliseconds(30'000))->phase, Phase::kExited);
  EXPECT_EQ(ReadFile((dir_ / "logs/attempt-0.out").string()), "hello world\n");
}

TEST(EnvironmentMap, SplitsAtTheFirstEqualsAndSkipsEntriesWithout) {
  const char* const entries[] = {"A=1", "B=x=y", "NO_EQUALS", "C=", nullptr};
  const std::map<std::string, std::string> want = {{"A", "1"}, {"B", "x=y"}, {"C", ""}};
  EXPECT_EQ(EnvironmentMap(entries), want);
}

TEST_F(LocalLauncherTest, Launch_WorkersGetTheAllowedEnvironmentOnly) {
  // An operator's token and anything else of the coordinator's environment stay behind; what
  // runs programs and MPI, the configured extra names and the spec's variables arrive.
  ::setenv("FULLBAND_TOKEN", "operator-secret", 1);
  ::setenv("FULLBAND_TLS_CA", "/operator/ca.crt", 1);
  ::setenv("SOME_OTHER_VARIABLE", "x", 1);
  ::setenv("OMPI_MCA_btl", "self,tcp", 1);
  ::setenv("MY_CLUSTER_SETTING", "y", 1);
  LocalLauncherOptions options = Direct();
  options.pass_env = {"MY_CLUSTER_SETTING"};
  LocalLauncher launcher(options);
  LaunchSpec spec = Spec("env | sort");
  spec.env["FULLBAND_JOB_ID"] = "job-1";
  spec.env["FULLBAND_TLS_CA"] = "/etc/fullband/ca.crt";
  auto handle = launcher.Launch(spec);
  ASSERT_TRUE(handle.ok());
  ASSERT_EQ(launcher.Wait(*handle, milliseconds(30'000))->phase, Phase::kExited);
  const std::string env = ReadFile((dir_ / "logs/attempt-0.out").string());
  ::unsetenv("FULLBAND_TOKEN");
  ::unsetenv("FULLBAND_TLS_CA");
  ::unsetenv("SOME_OTHER_VARIABLE");
  ::unsetenv("OMPI_MCA_btl");
  ::unsetenv("MY_CLUSTER_SETTING");
  EXPECT_EQ(env.find("operator-secret"), std::string::npos) << env;
  EXPECT_EQ(env.find("SOME_OTHER_VARIABLE"), std::string::npos) << env;
  EXPECT_EQ(env.find("/operator/ca.crt"), std::string::npos) << env;
  EXPECT_NE(env.find("\nPATH="), std::string::npos) << env;
  EXPECT_NE(env.find("OMPI_MCA_btl=self,tcp"), std::string::npos) << env;
  EXPECT_NE(env.find("MY_CLUSTER_SETTING=y"), std::string::npos) << env;
  EXPECT_NE(env.find("FULLBAND_JOB_ID=job-1"), std::string::npos) << env;
  EXPECT_NE(env.find("FULLBAND_TLS_CA=/etc/fullband/ca.crt"), std::string::npos) << env;
}

TEST_F(LocalLauncherTest, Poll_WhileRunning_IsRunning) {
  LocalLauncher launcher(Direct());
  const std::string fifo = MakeFifo();
  auto handle = launcher.Launch(Spec("echo up > " + fifo + "; exec sleep 1000"));
  ASSERT_TRUE(handle.ok());
  EXPECT_EQ(ReadFifo(fifo), "up\n");
  auto state = launcher.Poll(*handle);
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->phase, Phase::kRunning);
  auto waited = launcher.Wait(*handle, milliseconds(50));
  ASSERT_TRUE(waited.ok());
  EXPECT_EQ(waited->phase, Phase::kRunning);
  ASSERT_TRUE(launcher.Kill(*handle).ok());
}

TEST_F(LocalLauncherTest, Kill_EndsTheWholeSessionGrandchildToo) {
  LocalLauncher launcher(Direct());
  const std::string fifo = MakeFifo();
  auto handle = launcher.Launch(Spec("sleep 1000 & echo $! > " + fifo + "; wait"));
  ASSERT_TRUE(handle.ok());
  const pid_t grandchild = static_cast<pid_t>(std::stoll(ReadFifo(fifo)));
  ASSERT_TRUE(Running(grandchild));
  ASSERT_TRUE(Running(PidOf(*handle)));
  ASSERT_TRUE(launcher.Kill(*handle).ok());
  EXPECT_FALSE(Running(grandchild));
  auto state = launcher.Poll(*handle);
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->phase, Phase::kKilled);
  EXPECT_NE(state->detail.find("SIGTERM"), std::string::npos) << state->detail;
  EXPECT_FALSE(std::filesystem::exists("/proc/" + std::to_string(PidOf(*handle))));
  EXPECT_TRUE(launcher.Kill(*handle).ok());  // idempotent
}

TEST_F(LocalLauncherTest, Kill_WhenSigtermIsIgnored_SendsSigkillAfterTheGrace) {
  LocalLauncher launcher(Direct(milliseconds(200)));
  const std::string fifo = MakeFifo();
  auto handle = launcher.Launch(
      Spec("trap '' TERM; sleep 1000 & echo $! > " + fifo + "; while :; do wait; done"));
  ASSERT_TRUE(handle.ok());
  const pid_t grandchild = static_cast<pid_t>(std::stoll(ReadFifo(fifo)));
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(launcher.Kill(*handle).ok());
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(200));
  EXPECT_FALSE(Running(grandchild));
  auto state = launcher.Poll(*handle);
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->phase, Phase::kKilled);
  EXPECT_NE(state->detail.find("SIGKILL after the 200 ms grace"), std::string::npos)
      << state->detail;
}

TEST_F(LocalLauncherTest, Kill_LeftoverProcessesOfAnExitedLeader_AreKilled) {
  LocalLauncher launcher(Direct());
  const std::string fifo = MakeFifo();
  // The leader exits at once and leaves a background process in its session.
  auto handle = launcher.Launch(Spec("sleep 1000 & echo $! > " + fifo + "; exit 0"));
  ASSERT_TRUE(handle.ok());
  const pid_t leftover = static_cast<pid_t>(std::stoll(ReadFifo(fifo)));
  auto state = launcher.Wait(*handle, milliseconds(30'000));
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->phase, Phase::kExited);
  EXPECT_FALSE(Running(leftover));
}

TEST_F(LocalLauncherTest, Kill_HandleOfAnEarlierLauncher_EndsItsSession) {
  LocalLauncher first(Direct());
  const std::string fifo = MakeFifo();
  auto handle = first.Launch(Spec("sleep 1000 & echo $! > " + fifo + "; wait"));
  ASSERT_TRUE(handle.ok());
  const pid_t grandchild = static_cast<pid_t>(std::stoll(ReadFifo(fifo)));
  LocalLauncher restarted(Direct());  // as after a coordinator restart
  EXPECT_EQ(restarted.Poll(*handle).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(restarted.Kill(*handle).ok());
  EXPECT_FALSE(Running(grandchild));
  EXPECT_FALSE(Running(PidOf(*handle)));
  EXPECT_EQ(first.Poll(*handle)->phase, Phase::kKilled);  // first reaps its child
  EXPECT_TRUE(restarted.Kill(*handle).ok());              // gone: nothing to do
}

TEST_F(LocalLauncherTest, Kill_StaleHandleWithReusedPid_LeavesTheProcessAlone) {
  LocalLauncher launcher(Direct());
  // Our own pid with a start time that is not ours: must not be signalled.
  EXPECT_TRUE(launcher.Kill(std::to_string(getpid()) + ".1").ok());
}

TEST_F(LocalLauncherTest, Poll_UnknownHandle_IsNotFound) {
  LocalLauncher launcher(Direct());
  EXPECT_EQ(launcher.Poll("12345.678").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(launcher.Wait("x", milliseconds(1)).status().code(), StatusCode::kNotFound);
}

TEST_F(LocalLauncherTest, Kill_MalformedHandle_IsNotFound) {
  LocalLauncher launcher(Direct());
  for (const char* handle : {"", "abc", "12", "12.", ".5", "12.5x", "1.5"}) {
    EXPECT_EQ(launcher.Kill(handle).code(), StatusCode::kNotFound) << handle;
  }
}

TEST_F(LocalLauncherTest, Launch_BadSpec_IsInvalidArgument) {
  LocalLauncher launcher(Direct());
  LaunchSpec empty = Spec("");
  empty.command.clear();
  EXPECT_EQ(launcher.Launch(empty).status().code(), StatusCode::kInvalidArgument);
  LaunchSpec zero = Spec("exit 0");
  zero.processes = 0;
  EXPECT_EQ(launcher.Launch(zero).status().code(), StatusCode::kInvalidArgument);
  LaunchSpec no_logs = Spec("exit 0");
  no_logs.log_dir.clear();
  EXPECT_EQ(launcher.Launch(no_logs).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(LocalLauncherTest, Launch_MissingWorkerProgram_IsInvalidArgumentNamingIt) {
  LocalLauncher launcher(Direct());
  LaunchSpec spec = Spec("");
  spec.command = {"fullband-no-such-program", "train"};
  auto handle = launcher.Launch(spec);
  EXPECT_EQ(handle.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(handle.status().message().find("fullband-no-such-program"), std::string::npos);
  spec.command = {(dir_ / "missing").string()};
  EXPECT_EQ(launcher.Launch(spec).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(LocalLauncherTest, Launch_MissingMpirun_IsUnavailable) {
  LocalLauncherOptions options;
  options.mpirun = (dir_ / "no-mpirun").string();
  LocalLauncher launcher(options);
  auto handle = launcher.Launch(Spec("exit 0"));
  EXPECT_EQ(handle.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(handle.status().message().find("no-mpirun"), std::string::npos);
}

TEST_F(LocalLauncherTest, Launch_UnwritableLogDir_IsInternal) {
  LocalLauncher launcher(Direct());
  std::ofstream((dir_ / "file").string()) << "x";
  LaunchSpec spec = Spec("exit 0");
  spec.log_dir = (dir_ / "file/logs").string();
  auto handle = launcher.Launch(spec);
  EXPECT_EQ(handle.status().code(), StatusCode::kInternal);
  EXPECT_NE(handle.status().message().find("file/logs"), std::string::npos);
}

// A stand-in for mpirun that prints its arguments and the Open MPI root variables.
std::string WriteFakeMpirun(const std::filesystem::path& dir) {
  const std::string path = (dir / "fake-mpirun").string();
  std::ofstream(path) << "#!/bin/sh\necho \"$*\"\necho \"root=$OMPI_ALLOW_RUN_AS_ROOT,"
                         "$OMPI_ALLOW_RUN_AS_ROOT_CONFIRM\"\n";
  chmod(path.c_str(), 0755);
  return path;
}

TEST_F(LocalLauncherTest, Launch_MoreProcessesThanCores_PassesOversubscribe) {
  LocalLauncherOptions options;
  options.mpirun = WriteFakeMpirun(dir_);
  options.mpirun_args = {"--bind-to", "none"};
  options.cores = 2;
  LocalLauncher launcher(options);
  LaunchSpec spec = Spec("");
  spec.command = {"true", "a b"};
  spec.processes = 3;
  auto handle = launcher.Launch(spec);
  ASSERT_TRUE(handle.ok()) << handle.status().ToString();
  ASSERT_EQ(launcher.Wait(*handle, milliseconds(30'000))->exit_code, 0);
  const std::string out = ReadFile((dir_ / "logs/attempt-0.out").string());
  EXPECT_EQ(out.substr(0, out.find('\n')),
            "--mca odls_base_sigkill_timeout 0 --bind-to none --oversubscribe -np 3 true a b");
  EXPECT_NE(out.find(geteuid() == 0 ? "root=1,1\n" : "root=,\n"), std::string::npos) << out;
}

TEST_F(LocalLauncherTest, Launch_NoMoreProcessesThanCores_UsesMpirunWithoutOversubscribe) {
  LocalLauncherOptions options;
  options.mpirun = WriteFakeMpirun(dir_);
  options.cores = 2;
  LocalLauncher launcher(options);
  LaunchSpec spec = Spec("");
  spec.command = {"true"};
  spec.processes = 2;
  auto handle = launcher.Launch(spec);
  ASSERT_TRUE(handle.ok());
  ASSERT_EQ(launcher.Wait(*handle, milliseconds(30'000))->exit_code, 0);
  const std::string out = ReadFile((dir_ / "logs/attempt-0.out").string());
  EXPECT_EQ(out.substr(0, out.find('\n')), "--mca odls_base_sigkill_timeout 0 -np 2 true");
}

TEST_F(LocalLauncherTest, LaunchPollWaitKill_FromManyThreads_AreConsistent) {
  LocalLauncher launcher(Direct());
  std::vector<std::thread> threads;
  std::atomic<int> good{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 5; ++i) {
        const int code = t * 10 + i;
        auto handle = launcher.Launch(Spec("exit " + std::to_string(code), code));
        if (!handle.ok()) return;
        auto polled = launcher.Poll(*handle);  // running or exited, never an error
        auto state = launcher.Wait(*handle, milliseconds(30'000));
        if (polled.ok() && state.ok() && state->phase == Phase::kExited &&
            state->exit_code == code && launcher.Kill(*handle).ok()) {
          ++good;
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(good.load(), 20);
}

TEST_F(LocalLauncherTest, Counts_StartsFailuresKillsAndRunning) {
  LocalLauncher launcher(Direct());
  const std::string fifo = MakeFifo();
  auto running = launcher.Launch(Spec("echo up > " + fifo + "; exec sleep 1000"));
  ASSERT_TRUE(running.ok());
  EXPECT_EQ(ReadFifo(fifo), "up\n");
  LaunchSpec bad = Spec("");
  bad.command = {"fullband-no-such-program"};
  EXPECT_FALSE(launcher.Launch(bad).ok());
  PrometheusWriter before;
  WriteLauncherMetrics({{"local", launcher.Counts()}}, before);
  EXPECT_NE(before.text().find("fullband_launcher_attempts_started_total{launcher=\"local\"} 1"),
            std::string::npos);
  EXPECT_NE(before.text().find("fullband_launcher_launch_failures_total{launcher=\"local\"} 1"),
            std::string::npos);
  EXPECT_NE(before.text().find("fullband_launcher_attempts_running{launcher=\"local\"} 1"),
            std::string::npos);
  ASSERT_TRUE(launcher.Kill(*running).ok());
  PrometheusWriter after;
  WriteLauncherMetrics({{"local", launcher.Counts()}}, after);
  EXPECT_NE(after.text().find("fullband_launcher_kills_total{launcher=\"local\"} 1"),
            std::string::npos);
  EXPECT_NE(after.text().find("fullband_launcher_attempts_running{launcher=\"local\"} 0"),
            std::string::npos);
}

}  // namespace
}  // namespace fullband::coordinator

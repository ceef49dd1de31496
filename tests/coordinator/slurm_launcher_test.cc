// The slurm launcher's parts that need no Slurm: the sbatch script, Slurm's states, the
// completion log, its errors when the Slurm client is missing, and its submit retries against
// stand-in sbatch and squeue scripts. Against a real Slurm:
// tests/coordinator/slurm_e2e_test.sh (label slurm).
#include "coordinator/slurm_launcher.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "tests/common/temp_dir.h"

namespace fullband::coordinator {
namespace {

using Phase = LaunchState::Phase;

LaunchSpec Spec() {
  LaunchSpec spec;
  spec.job_id = "job-000007";
  spec.attempt = 2;
  spec.processes = 4;
  spec.command = {"/opt/fullband/bin/fullband", "worker", "--note", "it's"};
  spec.log_dir = "/var/fullband/jobs/job-000007";
  return spec;
}

TEST(SbatchScript, DefaultsAskOnlyForTheTasks) {
  StatusOr<std::string> script = SbatchScript(Spec(), "/work");
  ASSERT_TRUE(script.ok()) << script.status().ToString();
  const std::string base = "/var/fullband/jobs/job-000007/attempt-2";
  EXPECT_TRUE(script->starts_with("#!/bin/bash\n"));
  for (const std::string& line : std::vector<std::string>{
           "#SBATCH --job-name=fullband-job-000007-2\n", "#SBATCH --output=" + base + ".out\n",
           "#SBATCH --error=" + base + ".err\n", "#SBATCH --open-mode=append\n",
           "#SBATCH --chdir=/work\n", "#SBATCH --ntasks=4\n", "#SBATCH --no-requeue\n",
           "#SBATCH --export=ALL\n",
           "\nexec srun --mpi=pmix --kill-on-bad-exit=1 /opt/fullband/bin/fullband worker --note "
           "'it'\\''s'\n"}) {
    EXPECT_NE(script->find(line), std::string::npos) << line << " in\n" << *script;
  }
  for (const char* unset : {"--nodes", "--partition", "--time", "--gres", "--account", "--qos",
                            "--cpus-per-task", "--ntasks-per-node", "TOKEN="}) {
    EXPECT_EQ(script->find(unset), std::string::npos) << unset;
  }
}

TEST(SbatchScript, EveryFieldOfTheAllocation) {
  LaunchSpec spec = Spec();
  spec.slurm.partition = "gpu";
  spec.slurm.nodes = 2;
  spec.slurm.tasks_per_node = 2;
  spec.slurm.cpus_per_task = 8;
  spec.slurm.gpus_per_node = 2;
  spec.slurm.time_limit = "1-12:00:00";
  spec.slurm.account = "llm";
  spec.slurm.qos = "high";
  spec.slurm.sbatch_args = {"--constraint=a100", "--comment=two words"};
  spec.slurm.srun_args = {"--cpu-bind=cores"};
  StatusOr<std::string> script = SbatchScript(spec, "/work");
  ASSERT_TRUE(script.ok());
  for (const char* line :
       {"#SBATCH --partition=gpu\n", "#SBATCH --nodes=2\n", "#SBATCH --ntasks-per-node=2\n",
        "#SBATCH --cpus-per-task=8\n", "#SBATCH --gres=gpu:2\n", "#SBATCH --time=1-12:00:00\n",
        "#SBATCH --account=llm\n", "#SBATCH --qos=high\n",
        "#   sbatch --parsable --constraint=a100 '--comment=two words' "
        "/var/fullband/jobs/job-000007/attempt-2.sbatch\n",
        "exec srun --mpi=pmix --kill-on-bad-exit=1 --cpu-bind=cores /opt/"}) {
    EXPECT_NE(script->find(line), std::string::npos) << line << " in\n" << *script;
  }
}

TEST(SbatchScript, PathsAnSbatchLineCannotCarry_AreRefused) {
  LaunchSpec spec = Spec();
  spec.log_dir = "/var/my jobs";
  StatusOr<std::string> script = SbatchScript(spec, "/work");
  EXPECT_EQ(script.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(script.status().message().find("'/var/my jobs/attempt-2' holds whitespace"),
            std::string::npos)
      << script.status().ToString();
}

TEST(SlurmLaunchState, EachStateOfSlurm) {
  struct Case {
    const char* state;
    Phase phase;
  };
  for (const Case& c : {Case{"PENDING", Phase::kPending}, Case{"CONFIGURING", Phase::kPending},
                        Case{"RUNNING", Phase::kRunning}, Case{"COMPLETING", Phase::kRunning},
                        Case{"SUSPENDED", Phase::kRunning}, Case{"COMPLETED", Phase::kExited},
                        Case{"FAILED", Phase::kExited}, Case{"CANCELLED", Phase::kKilled},
                        Case{"CANCELLED by 0", Phase::kKilled}, Case{"TIMEOUT", Phase::kKilled},
                        Case{"NODE_FAIL", Phase::kKilled}, Case{"PREEMPTED", Phase::kKilled},
                        Case{"OUT_OF_MEMORY", Phase::kKilled}, Case{"BOOT_FAIL", Phase::kKilled},
                        Case{"DEADLINE", Phase::kKilled}}) {
    EXPECT_EQ(SlurmLaunchState("12", c.state, "", "0").phase, c.phase) << c.state;
  }
  LaunchState failed = SlurmLaunchState("12", "FAILED", "NonZeroExitCode", "3:0");
  EXPECT_EQ(failed.exit_code, 3);
  EXPECT_EQ(failed.detail, "Slurm job 12 FAILED (NonZeroExitCode)");
  EXPECT_EQ(SlurmLaunchState("12", "PENDING", "Resources", "0").detail,
            "Slurm job 12 PENDING (Resources)");
  EXPECT_EQ(SlurmLaunchState("12", "TIMEOUT", "None", "0:15").detail, "Slurm job 12 TIMEOUT");
}

TEST(FindInCompletionLog, TheLastRecordOfTheJob) {
  const std::string log =
      "JobId=11 UserId=root(0) GroupId=root(0) Name=fullband-job-000001-0 JobState=COMPLETED "
      "Partition=debug ExitCode=0:0\n"
      "JobId=12 UserId=root(0) GroupId=root(0) Name=fullband-job-000002-0 JobState=TIMEOUT "
      "Partition=debug TimeLimit=1 DerivedExitCode=0:0 ExitCode=0:15\n"
      "JobId=112 UserId=root(0) JobState=FAILED ExitCode=1:0\n";
  std::optional<LaunchState> timeout = FindInCompletionLog(log, "12");
  ASSERT_TRUE(timeout.has_value());
  EXPECT_EQ(timeout->phase, Phase::kKilled);
  EXPECT_EQ(timeout->detail, "Slurm job 12 TIMEOUT");
  std::optional<LaunchState> failed = FindInCompletionLog(log, "112");
  ASSERT_TRUE(failed.has_value());
  EXPECT_EQ(failed->phase, Phase::kExited);
  EXPECT_EQ(failed->exit_code, 1);
  EXPECT_FALSE(FindInCompletionLog(log, "1").has_value());
}

TEST(SlurmLauncher, MissingSlurmClient_IsNamed) {
  SlurmLauncherOptions options;
  options.bin_dir = "/nonexistent/slurm/bin";
  SlurmLauncher launcher(options);
  LaunchSpec spec = Spec();
  spec.log_dir = (std::filesystem::temp_directory_path() / "fullband-slurm-launcher-test").string();
  StatusOr<std::string> id = launcher.Launch(spec);
  EXPECT_EQ(id.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(id.status().message().find("sbatch not found in /nonexistent/slurm/bin"),
            std::string::npos)
      << id.status().ToString();
  EXPECT_TRUE(std::filesystem::exists(spec.log_dir + "/attempt-2.sbatch"));  // kept to read
  EXPECT_EQ(launcher.Poll("12").status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(launcher.Poll("pid.123").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(launcher.Kill("x").code(), StatusCode::kNotFound);
  EXPECT_EQ(launcher.Counts().failures, 1);
  std::filesystem::remove_all(spec.log_dir);
}

// A bin_dir whose sbatch always loses its answer (Slurm's own words for it) and counts its calls,
// and whose squeue prints `listed` (id|script lines, as for --format=%i|%o).
class LostAnswer : public ::testing::Test {
 protected:
  void SetUp() override {
    Script("sbatch",
           "echo >> \"$(dirname \"$0\")/sbatch.calls\"\n"
           "echo 'sbatch: error: Batch job submission failed: Socket timed out on send/recv "
           "operation' >&2\nexit 1\n");
    Script("squeue", "cat \"$(dirname \"$0\")/listed\"\n");
    options_.bin_dir = dir_;
    options_.submit_attempts = 2;
    options_.submit_backoff = std::chrono::milliseconds(1);
    spec_.log_dir = dir_ + "/jobs/job-000007";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void Script(const std::string& name, const std::string& body) {
    std::ofstream(dir_ + "/" + name) << "#!/bin/sh\n" << body;
    std::filesystem::permissions(dir_ + "/" + name, std::filesystem::perms::owner_all);
  }
  void Listed(const std::string& lines) { std::ofstream(dir_ + "/listed") << lines; }
  int SbatchCalls() {
    std::ifstream in(dir_ + "/sbatch.calls");
    return static_cast<int>(std::count(std::istreambuf_iterator<char>(in), {}, '\n'));
  }
  // The path the launcher gives sbatch (absolute, normal).
  std::string OurScript() const {
    return std::filesystem::path(spec_.log_dir + "/attempt-2.sbatch").lexically_normal().string();
  }

  const std::string dir_ = testing::MakeTempDir("fullband_slurm_launcher_");
  SlurmLauncherOptions options_;
  LaunchSpec spec_ = Spec();
};

// The job a lost answer submitted is adopted, not submitted again, and told apart from another
// coordinator's job of the same name by its script.
TEST_F(LostAnswer, TheSubmittedJobIsFoundByItsNameAndScript) {
  Listed("41|/elsewhere/jobs/job-000007/attempt-2.sbatch\n42|" + OurScript() + "\n");
  SlurmLauncher launcher(options_);
  StatusOr<std::string> id = launcher.Launch(spec_);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(*id, "42");
  EXPECT_EQ(SbatchCalls(), 1);
  EXPECT_EQ(launcher.Counts().started, 1);
}

// Only another coordinator's job of that name: every try is made, then the launch fails.
TEST_F(LostAnswer, AnotherCoordinatorsJobOfTheSameName_IsNotAdopted) {
  Listed("41|/elsewhere/jobs/job-000007/attempt-2.sbatch\n");
  SlurmLauncher launcher(options_);
  StatusOr<std::string> id = launcher.Launch(spec_);
  EXPECT_EQ(id.status().code(), StatusCode::kUnavailable) << id.status().ToString();
  EXPECT_NE(id.status().message().find("did not accept it after 2 tries: sbatch: error"),
            std::string::npos)
      << id.status().ToString();
  EXPECT_EQ(SbatchCalls(), 2);
}

// The job is looked for after the last try too, so a lost last answer leaves nothing unwatched.
TEST_F(LostAnswer, TheLastTrysJob_IsFoundToo) {
  options_.submit_attempts = 1;
  Listed("43|" + OurScript() + "\n");
  SlurmLauncher launcher(options_);
  StatusOr<std::string> id = launcher.Launch(spec_);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(*id, "43");
  EXPECT_EQ(SbatchCalls(), 1);
}

}  // namespace
}  // namespace fullband::coordinator

// Tests of coordinator/local_launcher.h with the real mpirun (Open MPI): a 2-rank launch
// runs to completion, and Kill ends every rank even though Open MPI gives each its own
// process group.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "coordinator/local_launcher.h"
#include "tests/coordinator/launcher_test_util.h"

namespace fullband::coordinator {
namespace {

using std::chrono::milliseconds;
using testing::ReadFile;
using testing::Running;

class LocalLauncherMpiTest : public testing::TempDirTest {
 protected:
};

TEST_F(LocalLauncherMpiTest, MpirunTwoRanksHostname_ExitsZeroAndLogsBothRanks) {
  LocalLauncher launcher;
  LaunchSpec spec;
  spec.job_id = "mpi";
  spec.processes = 2;
  spec.command = {"hostname"};
  spec.log_dir = dir_.string();
  auto handle = launcher.Launch(spec);
  ASSERT_TRUE(handle.ok()) << handle.status().ToString();
  auto state = launcher.Wait(*handle, milliseconds(120'000));
  ASSERT_TRUE(state.ok());
  ASSERT_EQ(state->phase, LaunchState::Phase::kExited)
      << state->detail << "\n"
      << ReadFile((dir_ / "attempt-0.err").string());
  EXPECT_EQ(state->exit_code, 0);
  char host[256] = {};
  ASSERT_EQ(gethostname(host, sizeof(host) - 1), 0);
  EXPECT_EQ(ReadFile((dir_ / "attempt-0.out").string()),
            std::string(host) + "\n" + std::string(host) + "\n");
}

TEST_F(LocalLauncherMpiTest, Kill_EndsEveryRank) {
  LocalLauncherOptions options;
  options.kill_grace = milliseconds(5000);
  LocalLauncher launcher(options);
  // Each rank writes its pid into its own FIFO; reading them waits until both ranks run.
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_EQ(mkfifo((dir_ / ("rank-" + std::to_string(rank))).c_str(), 0600), 0);
  }
  LaunchSpec spec;
  spec.job_id = "mpi";
  spec.processes = 2;
  spec.command = {"sh", "-c",
                  "echo $$ > " + dir_.string() + "/rank-$OMPI_COMM_WORLD_RANK; exec sleep 1000"};
  spec.log_dir = (dir_ / "logs").string();
  auto handle = launcher.Launch(spec);
  ASSERT_TRUE(handle.ok()) << handle.status().ToString();
  pid_t ranks[2];
  for (int rank = 0; rank < 2; ++rank) {
    ranks[rank] = static_cast<pid_t>(
        std::stoll(ReadFile((dir_ / ("rank-" + std::to_string(rank))).string())));
    EXPECT_TRUE(Running(ranks[rank]));
  }
  ASSERT_TRUE(launcher.Kill(*handle).ok());
  EXPECT_FALSE(Running(ranks[0]));
  EXPECT_FALSE(Running(ranks[1]));
  auto state = launcher.Poll(*handle);
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->phase, LaunchState::Phase::kKilled) << state->detail;
}

}  // namespace
}  // namespace fullband::coordinator

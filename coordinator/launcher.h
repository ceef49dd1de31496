// Launcher: how the coordinator starts, watches and kills the worker processes of a job.
//
// `local` runs `mpirun -np N <worker command>` on this machine in its own process group with
// stdout/stderr in files under the job's directory; `slurm` (sbatch/squeue/scancel) fits the
// same interface. The coordinator's logic talks only to this interface, so its tests use a fake.
// Implementations are thread-safe: the coordinator may launch, poll and kill from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace fullband::coordinator {

// One attempt of one job: what to run and where its logs go.
struct LaunchSpec {
  std::string job_id;
  int64_t attempt = 0;                     // 0 for the first launch, +1 per restart
  int64_t processes = 1;                   // MPI ranks (TP × DP)
  std::vector<std::string> command;        // the worker command line (argv), without mpirun
  std::map<std::string, std::string> env;  // added to the inherited environment
  std::string log_dir;                     // created if missing; holds the attempt's logs
};

// What Poll sees of a launched attempt.
struct LaunchState {
  enum class Phase { kRunning, kExited, kKilled, kLost };
  Phase phase = Phase::kRunning;
  int exit_code = 0;   // kExited: the launcher process's exit code
  std::string detail;  // human-readable, e.g. "killed by signal 9", "not found by squeue"
};

class Launcher {
 public:
  virtual ~Launcher() = default;

  // "local", "slurm", "fake".
  virtual std::string_view name() const = 0;

  // Starts an attempt and returns its handle (opaque; a pid or a Slurm job id). Errors:
  // INVALID_ARGUMENT (empty command, processes < 1), UNAVAILABLE (mpirun/sbatch could not be
  // started), INTERNAL (log directory not writable).
  virtual StatusOr<std::string> Launch(const LaunchSpec& spec) = 0;

  // Non-blocking state of an attempt. NOT_FOUND for a handle this launcher never returned.
  virtual StatusOr<LaunchState> Poll(const std::string& handle) = 0;

  // Ends every process of the attempt (SIGTERM to the process group, SIGKILL after a grace
  // period; scancel for Slurm). Idempotent: killing a finished attempt is OK.
  virtual Status Kill(const std::string& handle) = 0;
};

}  // namespace fullband::coordinator

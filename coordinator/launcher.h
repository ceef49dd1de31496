// Launcher: how the coordinator starts, watches and kills the worker processes of a job.
//
// `local` runs `mpirun -np N <worker command>` on this machine in its own process group with
// stdout/stderr in files under the job's directory; `slurm` (sbatch/squeue/scancel) fits the
// same interface. The coordinator's logic talks only to this interface, so its tests use a fake.
// Implementations are thread-safe: the coordinator may launch, poll and kill from any thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/config.h"
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
  SlurmConfig slurm;                       // the allocation, for the slurm launcher
};

// What Poll sees of a launched attempt.
struct LaunchState {
  // kPending: queued by a scheduler, no process started yet; the coordinator's launch deadline
  // starts when the attempt leaves it. kRunning: started. The rest are final.
  enum class Phase { kPending, kRunning, kExited, kKilled, kLost };
  Phase phase = Phase::kRunning;
  int exit_code = 0;   // kExited: the launcher process's exit code
  std::string detail;  // human-readable, e.g. "killed by signal 9", "Slurm job 12 TIMEOUT"
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

// A launcher's totals for /metrics.
struct LauncherCounts {
  int64_t started = 0;   // attempts started
  int64_t failures = 0;  // launches refused or failed before anything started
  int64_t kills = 0;     // attempts ended by Kill
  int64_t running = 0;   // attempts started and not yet seen to end
};

class PrometheusWriter;

// fullband_launcher_attempts_started_total, _launch_failures_total, _kills_total and
// _attempts_running, a sample per launcher (label launcher = its name).
void WriteLauncherMetrics(const std::vector<std::pair<std::string, LauncherCounts>>& launchers,
                          PrometheusWriter& writer);

// INVALID_ARGUMENT for a spec no launcher can start: an empty command, processes < 1, a negative
// attempt, no log directory.
Status CheckLaunchSpec(const LaunchSpec& spec);

// The executable file `program` names: itself when it holds a '/', else the first match in the
// ':'-separated `path`; "" when there is none.
std::string ResolveProgram(const std::string& program, const std::string& path);

// Note [Worker environment]: a worker does not inherit the coordinator's whole environment (an
// operator's FULLBAND_TOKEN must never reach a job). It gets, from the coordinator's
// environment, only what runs programs, MPI and the GPU need — kWorkerEnvNames, the variables
// starting with kWorkerEnvPrefixes, and the launcher options' pass_env (worker_env) — and on top
// the LaunchSpec's own variables (kJobIdEnv and the names below it).
inline constexpr const char* kWorkerEnvNames[] = {"PATH",
                                                  "HOME",
                                                  "USER",
                                                  "LOGNAME",
                                                  "SHELL",
                                                  "LANG",
                                                  "LANGUAGE",
                                                  "TZ",
                                                  "TMPDIR",
                                                  "LD_LIBRARY_PATH",
                                                  "CUDA_VISIBLE_DEVICES",
                                                  "CUDA_HOME",
                                                  "OMP_NUM_THREADS"};
inline constexpr const char* kWorkerEnvPrefixes[] = {"LC_",   "OMPI_", "PMIX_",
                                                     "OPAL_", "NCCL_", "UCX_"};

// The LaunchSpec's own variables: the coordinator sets them, and `fullband worker` reads them as
// its options' defaults (cli/worker_command.cc; the address and CA serve every client command).
inline constexpr char kJobIdEnv[] = "FULLBAND_JOB_ID";
inline constexpr char kAttemptEnv[] = "FULLBAND_ATTEMPT";
inline constexpr char kJobDirEnv[] = "FULLBAND_JOB_DIR";
inline constexpr char kCoordinatorEnv[] = "FULLBAND_COORDINATOR";
inline constexpr char kTlsCaEnv[] = "FULLBAND_TLS_CA";
inline constexpr char kWorkerTokenEnv[] = "FULLBAND_WORKER_TOKEN";

// `environ`'s NAME=value entries (null-ended) by name; an entry without '=' is skipped.
std::map<std::string, std::string> EnvironmentMap(const char* const* environ);

// The environment of a worker: the allowed part of `environ` (NAME=value entries, null-ended),
// `pass_env`'s names among them, then `spec_env` on top.
std::map<std::string, std::string> WorkerEnvironment(
    const char* const* environ, const std::vector<std::string>& pass_env,
    const std::map<std::string, std::string>& spec_env);

// Starts `program` (a path) with `argv` and exactly `env`: stdin from /dev/null, stdout and
// stderr to `out_fd` and `err_fd`, no other descriptor inherited, no blocked signals and every
// signal at its default disposition (the coordinator may ignore SIGPIPE or block signals on the
// calling thread); in a new session (and so a new process group) when `new_session`. Returns 0,
// or the errno of a failed start.
int Spawn(const std::string& program, std::vector<std::string> argv,
          const std::map<std::string, std::string>& env, int out_fd, int err_fd, bool new_session,
          pid_t* pid);

// What a program run to its end printed, and how it ended.
struct ProgramOutput {
  int exit_code = -1;  // -1: killed by a signal, or by RunProgram at the timeout
  bool timed_out = false;
  std::string out, err;  // at most 1 MiB of each
};

// Runs `program` (a path) with `argv` and exactly `env`, stdin from /dev/null, and collects its
// output; a program still running after `timeout` is killed. UNAVAILABLE when it cannot start.
StatusOr<ProgramOutput> RunProgram(const std::string& program, const std::vector<std::string>& argv,
                                   const std::map<std::string, std::string>& env,
                                   std::chrono::milliseconds timeout);

}  // namespace fullband::coordinator

// SlurmLauncher: the `slurm` Launcher (launcher.h, docs/SLURM.md). Each attempt is one Slurm
// batch job: an sbatch script written to <log_dir>/attempt-<n>.sbatch (kept for the operator)
// and submitted with `sbatch --parsable`; the script starts the ranks with `srun --mpi=pmix`.
// The worker's environment (Note [Worker environment] in launcher.h, its token included) goes
// to sbatch as sbatch's own environment (--export=ALL), never on a command line or in a file.
// The handle is the Slurm job id, kept in the coordinator's store, so Poll and Kill need no state
// of this process: a restarted coordinator finds its running attempts again.
//
// Poll answers from one `squeue` call per poll interval for every attempt polled recently; an
// attempt squeue no longer lists is looked up once with sacct where accounting exists, else in
// the job completion log (JobCompType=jobcomp/filetxt). Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "coordinator/launcher.h"

namespace fullband::coordinator {

struct SlurmLauncherOptions {
  // The directory of sbatch, squeue, scancel, sacct and scontrol; "" = looked up in PATH.
  std::string bin_dir;
  // The most often squeue runs (one call covers every attempt).
  std::chrono::milliseconds poll_interval{5'000};
  // sbatch tries while Slurm is unreachable, waiting submit_backoff, doubled each time, between.
  int submit_attempts = 4;
  std::chrono::milliseconds submit_backoff{1'000};
  // Longest any one Slurm command may run.
  std::chrono::milliseconds command_timeout{30'000};
  // Kill waits this long for scancel's job to end (Slurm's KillWait included).
  std::chrono::milliseconds cancel_timeout{120'000};
  // Further variables of the coordinator's environment that workers get.
  std::vector<std::string> pass_env;
  // The jobs' working directory (--chdir); "" = the coordinator's.
  std::string working_dir;
};

// The sbatch script of one attempt: #SBATCH lines for the job's name, logs, working directory,
// tasks and every set field of spec.slurm, then `exec srun --mpi=pmix ... <worker command>`.
// INVALID_ARGUMENT for a path that an #SBATCH line cannot carry (whitespace, quotes).
StatusOr<std::string> SbatchScript(const LaunchSpec& spec, const std::string& working_dir);

// The Slurm job name of an attempt: fullband-<job>-<attempt>.
std::string SlurmJobName(const LaunchSpec& spec);

// What Poll makes of Slurm's name for a job's state (squeue's %T, sacct's State, the completion
// log's JobState) with its reason and exit code ("2", or sacct's "2:0"): PENDING and
// CONFIGURING are kPending; RUNNING, COMPLETING, SUSPENDED and the like kRunning; COMPLETED and
// FAILED kExited; CANCELLED, TIMEOUT, NODE_FAIL, PREEMPTED, OUT_OF_MEMORY, BOOT_FAIL, DEADLINE
// kKilled. `detail` names the Slurm job, its state and reason.
LaunchState SlurmLaunchState(const std::string& job_id, std::string_view state,
                             std::string_view reason, std::string_view exit_code);

// The completion log's record of `job_id` (jobcomp/filetxt: "JobId=12 ... JobState=TIMEOUT ...
// ExitCode=0:15 ..." a line), the last one if it was logged more than once.
std::optional<LaunchState> FindInCompletionLog(std::string_view log, const std::string& job_id);

class SlurmLauncher final : public Launcher {
 public:
  explicit SlurmLauncher(SlurmLauncherOptions options = {});

  std::string_view name() const override { return "slurm"; }

  // Writes the script, then runs sbatch. UNAVAILABLE when sbatch is missing or Slurm stays
  // unreachable through the retries (a job that a lost answer had submitted is found by its
  // name and script, never submitted twice); FAILED_PRECONDITION with sbatch's words when Slurm
  // rejects the job (a bad partition or account); INVALID_ARGUMENT and INTERNAL as in launcher.h.
  StatusOr<std::string> Launch(const LaunchSpec& spec) override;

  // kPending with squeue's reason, kRunning, or how the job ended. UNAVAILABLE when Slurm
  // cannot be asked; NOT_FOUND for a handle that is not a Slurm job id.
  StatusOr<LaunchState> Poll(const std::string& handle) override;

  // scancel, then waits until Slurm reports the job ended (cancel_timeout; INTERNAL past it).
  // OK for a job that has ended or that Slurm no longer knows.
  Status Kill(const std::string& handle) override;

  // For /metrics (WriteLauncherMetrics).
  LauncherCounts Counts() const;
  // fullband_launcher_slurm_commands_total{command}: the load this launcher puts on slurmctld.
  void RenderCommandMetrics(PrometheusWriter& writer) const;

 private:
  struct Known {  // what the last squeue said of a job, and when Poll last asked
    std::optional<LaunchState> state;
    std::chrono::steady_clock::time_point polled;
  };

  // Runs a Slurm command (counted) with `env`, or the coordinator's environment; UNAVAILABLE when
  // it is missing or cannot start.
  StatusOr<ProgramOutput> Slurm(const std::string& command, std::vector<std::string> args,
                                const std::map<std::string, std::string>* env = nullptr);
  // squeue for `ids`: their states, or none for ids squeue no longer lists.
  StatusOr<std::map<std::string, LaunchState>> Squeue(const std::vector<std::string>& ids);
  // sacct or the completion log for a job squeue no longer lists; kLost when neither knows it.
  LaunchState Finished(const std::string& id);
  // The id of a live (not ended) job of this user named `name` that runs `script_path`, if any.
  std::optional<std::string> FindLiveJob(const std::string& name, const std::string& script_path);
  // sbatch with retries while Slurm is unreachable, each followed by a look for the job (a lost
  // answer).
  StatusOr<std::string> Submit(const LaunchSpec& spec, const std::string& script_path,
                               const std::map<std::string, std::string>& env);

  const SlurmLauncherOptions options_;
  const std::map<std::string, std::string> own_env_;  // the coordinator's, for squeue and the like
  mutable std::mutex mu_;
  std::map<std::string, Known> known_;  // by Slurm job id
  std::chrono::steady_clock::time_point last_squeue_{};
  std::map<std::string, int64_t> commands_;  // runs per Slurm command
  int64_t started_ = 0, failures_ = 0, kills_ = 0;
  std::optional<bool> accounting_;  // from scontrol show config, once
  std::string completion_log_;
};

}  // namespace fullband::coordinator

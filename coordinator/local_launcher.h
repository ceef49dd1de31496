// LocalLauncher: the `local` Launcher (launcher.h). Each attempt runs `mpirun -np N <command>`
// (or, for N == 1 when asked, the command itself) as the leader of a new session and process
// group, stdin from /dev/null, stdout/stderr appended to <log_dir>/attempt-<n>.out|.err. Errors as
// in launcher.h; a worker program that cannot be found is INVALID_ARGUMENT before anything starts.
// Thread-safe; Kill blocks for at most the grace period (plus the SIGKILL wait), Poll never.
// See Note [Attempt cleanup] for what happens to the rest of a group when its leader exits.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "coordinator/launcher.h"

namespace fullband::coordinator {

struct LocalLauncherOptions {
  // The mpirun program: a path, or a name looked up in PATH.
  std::string mpirun = "mpirun";
  // Extra mpirun arguments placed before `-np`, e.g. {"--bind-to", "none"}.
  std::vector<std::string> mpirun_args;
  // Run a 1-process attempt as the command itself, without mpirun.
  bool direct_single_process = false;
  // Time between SIGTERM and SIGKILL in Kill.
  std::chrono::milliseconds kill_grace{10'000};
  // Cores available to ranks; more processes than this adds --oversubscribe. 0: the CPUs this
  // process may run on (sched_getaffinity).
  int cores = 0;
  // Names of further variables of the coordinator's environment that workers get (Note [Worker
  // environment]).
  std::vector<std::string> pass_env;
};

class LocalLauncher final : public Launcher {
 public:
  explicit LocalLauncher(LocalLauncherOptions options = {});
  // Does not kill running attempts: a coordinator that stops leaves its jobs running, and a
  // restarted one ends them with Kill(handle).
  ~LocalLauncher() override;

  std::string_view name() const override { return "local"; }

  // Handles look like "<pid>.<start time in clock ticks>": the start time tells a process
  // that reused the pid from the one launched.
  StatusOr<std::string> Launch(const LaunchSpec& spec) override;

  // kRunning; kExited with the exit code; kKilled with the signal ("killed by SIGKILL after
  // the 10000 ms grace" when Kill did it). NOT_FOUND for a handle this launcher never
  // returned.
  StatusOr<LaunchState> Poll(const std::string& handle) override;

  // SIGTERM to every process of the attempt (its session: Note [Attempt cleanup] in the .cc),
  // then SIGKILL to what is left once the leader has exited or the grace period is over,
  // whichever comes first. A handle from an earlier coordinator
  // process (same pid and start time, still a group leader) is killed the same way, so a
  // restarted coordinator can end its predecessor's attempts. OK for finished attempts and
  // for handles whose process is gone. Errors: NOT_FOUND (not a handle of this launcher's
  // form), INTERNAL (the leader outlived SIGKILL by 10 s).
  Status Kill(const std::string& handle) override;

  // Blocks until the attempt ends or `timeout` passes, then returns what Poll returns
  // (kRunning on timeout). NOT_FOUND as Poll.
  StatusOr<LaunchState> Wait(const std::string& handle, std::chrono::milliseconds timeout);

  // For /metrics (WriteLauncherMetrics).
  LauncherCounts Counts() const;

 private:
  struct Attempt;

  // The attempt of `handle`, or null.
  std::shared_ptr<Attempt> Find(const std::string& handle);
  StatusOr<std::vector<std::string>> CommandLine(const LaunchSpec& spec, const std::string& path,
                                                 bool direct, std::string* program) const;
  // Reaps an exited leader (after Note [Attempt cleanup]) and records its final state.
  void Finish(Attempt& attempt, bool block);

  const LocalLauncherOptions options_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Attempt>> attempts_;
  int64_t started_ = 0, failures_ = 0, kills_ = 0;
};

}  // namespace fullband::coordinator

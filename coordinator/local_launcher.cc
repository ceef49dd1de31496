// LocalLauncher (local_launcher.h): posix_spawn into a new session, pidfd waits.
//
// Note [Attempt cleanup]: an attempt's leader (mpirun, or the direct command) starts a new
// session, which makes it a process group of its own too. Open MPI moves every rank into a
// process group of its own, but not out of the session, so the session is what holds an
// attempt together: Kill signals every live process whose session id is the leader's pid
// (found in /proc) as well as the leader's group. When the leader has exited, whatever is left
// of the session is killed with SIGKILL before the leader is reaped; the leader's zombie keeps
// its pid, and so the session id, from being reused until then, so no signal reaches an
// unrelated process, and no rank outlives its attempt. A worker that calls setsid() itself
// escapes this.
#include "coordinator/local_launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "common/logging.h"

extern char** environ;

namespace fullband::coordinator {
namespace {

using Clock = std::chrono::steady_clock;

// Debian 12's <sys/pidfd.h> declares these without C linkage, so call the kernel directly.
int PidfdOpen(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }
int PidfdSendSignal(int pidfd, int sig) {
  return static_cast<int>(syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
}

// Fields of /proc/<pid>/stat.
struct ProcStat {
  char state = '?';         // R, S, D, Z, ...
  pid_t session = 0;        // field 6
  uint64_t start_time = 0;  // field 22, clock ticks since boot
};

std::optional<ProcStat> ReadProcStat(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return std::nullopt;
  // The command name, in parentheses, may hold spaces: fields start after the last ')'.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(stat.substr(close + 2));
  ProcStat out;
  std::string field;
  for (int k = 3; fields >> field; ++k) {
    if (k == 3) out.state = field[0];
    if (k == 6) out.session = static_cast<pid_t>(std::stoll(field));
    if (k == 22) {
      out.start_time = std::stoull(field);
      return out;
    }
  }
  return std::nullopt;
}

// True while `pid` is the live (not zombie) process that started at `start_time`.
bool Alive(pid_t pid, uint64_t start_time) {
  std::optional<ProcStat> stat = ReadProcStat(pid);
  return stat && stat->state != 'Z' && stat->start_time == start_time;
}

// The live (not zombie) processes of session `sid`, from /proc.
std::vector<pid_t> SessionMembers(pid_t sid) {
  std::vector<pid_t> members;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = static_cast<pid_t>(std::stoll(name));
    std::optional<ProcStat> stat = ReadProcStat(pid);
    if (stat && stat->session == sid && stat->state != 'Z') members.push_back(pid);
  }
  return members;
}

// pidfds of the live processes of session `sid`. Each is checked again after its pidfd is
// open, so a pid that was reused between the scan and the open is left out.
std::vector<int> OpenSessionMembers(pid_t sid) {
  std::vector<int> fds;
  for (pid_t pid : SessionMembers(sid)) {
    const int fd = PidfdOpen(pid);
    if (fd < 0) continue;  // gone already
    std::optional<ProcStat> stat = ReadProcStat(pid);
    if (stat && stat->session == sid && stat->state != 'Z') {
      fds.push_back(fd);
    } else {
      close(fd);
    }
  }
  return fds;
}

// Sends `sig` to process group `sid` and every live process of session `sid`.
void SignalSession(pid_t sid, int sig) {
  kill(-sid, sig);
  for (int fd : OpenSessionMembers(sid)) {
    PidfdSendSignal(fd, sig);
    close(fd);
  }
}

// SIGKILLs every process of session `sid` and waits for each to exit; again while the
// session has members (one may fork during a scan), at most 20 rounds or 10 s.
void KillSession(pid_t sid) {
  kill(-sid, SIGKILL);
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  for (int round = 0; round < 20 && Clock::now() < deadline; ++round) {
    std::vector<pollfd> fds;
    for (int fd : OpenSessionMembers(sid)) {
      PidfdSendSignal(fd, SIGKILL);
      fds.push_back({fd, POLLIN, 0});
    }
    if (fds.empty()) return;
    // Each pidfd turns readable when its process exits.
    size_t exited = 0;
    while (exited < fds.size() && Clock::now() < deadline) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (poll(fds.data(), fds.size(), static_cast<int>(left.count())) <= 0) break;
      for (pollfd& p : fds) {
        if (p.fd >= 0 && (p.revents & POLLIN)) {
          close(p.fd);
          p.fd = -1;  // poll ignores negative descriptors
          ++exited;
        }
      }
    }
    for (pollfd& p : fds) {
      if (p.fd >= 0) close(p.fd);
    }
  }
}

// The executable that `program` names: itself if it contains '/', else the first executable
// regular file `<dir>/<program>` over the directories of `path`.

int AvailableCores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::thread::hardware_concurrency());
}

std::string SignalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

// Waits up to `timeout` for `pid` (a child whose pidfd is `pidfd`, or -1) to exit, without
// reaping it. True when it has exited.
bool WaitExited(pid_t pid, int pidfd, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (true) {
    siginfo_t info{};
    if (waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
      return true;  // ECHILD: reaped elsewhere; nothing left to wait for
    }
    if (info.si_pid != 0) return true;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    if (pidfd >= 0) {
      pollfd p = {pidfd, POLLIN, 0};
      poll(&p, 1, static_cast<int>(left.count()));  // readable once the process exits
    } else {
      // No pidfd (kernel < 5.3): look again every 10 ms.
      std::this_thread::sleep_for(std::min(left, std::chrono::milliseconds(10)));
    }
  }
}

// Waits up to `timeout` for the process `pid` started at `start_time` (not a child) to be
// gone or a zombie. True when it is.
bool WaitGone(pid_t pid, uint64_t start_time, std::chrono::milliseconds timeout) {
  const int pidfd = PidfdOpen(pid);
  const auto deadline = Clock::now() + timeout;
  bool gone = true;
  while (Alive(pid, start_time)) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      gone = false;
      break;
    }
    if (pidfd >= 0) {
      pollfd p = {pidfd, POLLIN, 0};
      poll(&p, 1, static_cast<int>(left.count()));  // readable once the process exits
    } else {
      std::this_thread::sleep_for(std::min(left, std::chrono::milliseconds(10)));
    }
  }
  if (pidfd >= 0) close(pidfd);
  return gone;
}

// The last line of the log file `path` that reports an error: a worker's "fullband worker: ..."
// or an ERROR log line ("E <time> ..."); "" when there is none in its last 16 KiB.
std::string LastErrorLine(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  const std::streamoff from = std::max<std::streamoff>(0, size - (16 << 10));
  in.seekg(from);
  std::string line, last;
  while (std::getline(in, line)) {
    if (line.starts_with("fullband worker: ") || line.starts_with("E ")) last = line;
  }
  constexpr size_t kMax = 400;  // a reason stays readable (and under the RPC's limits)
  return last.size() > kMax ? last.substr(0, kMax) + "..." : last;
}

}  // namespace

struct LocalLauncher::Attempt {
  ~Attempt() {
    if (pidfd >= 0) close(pidfd);
  }
  std::mutex mu;  // Kill, Wait and Finish on this attempt; Poll only tries it
  pid_t pid = 0;
  int pidfd = -1;
  bool done = false;        // reaped; `state` is final
  std::string kill_detail;  // set by Kill before the end it caused
  std::string err_log;      // the attempt's stderr file
  LaunchState state;
};

LocalLauncher::LocalLauncher(LocalLauncherOptions options) : options_(std::move(options)) {}

LocalLauncher::~LocalLauncher() = default;

namespace {

// The attempt's stdout and stderr files (<log_dir>/attempt-<N>.out, .err), opened for appending;
// the header line naming the command goes to stderr.
struct LogFiles {
  std::string base;  // <log_dir>/attempt-<N>
  int out = -1, err = -1;
};

StatusOr<LogFiles> OpenLogs(const LaunchSpec& spec, const std::string& command_line) {
  std::error_code ec;
  std::filesystem::create_directories(spec.log_dir, ec);
  if (ec) {
    return InternalError("launch job " + spec.job_id + ": cannot create log directory " +
                         spec.log_dir + ": " + ec.message());
  }
  LogFiles logs;
  logs.base = spec.log_dir + "/attempt-" + std::to_string(spec.attempt);
  for (int* fd : {&logs.out, &logs.err}) {
    const std::string file = logs.base + (fd == &logs.out ? ".out" : ".err");
    *fd = open(file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (*fd < 0) {
      const std::string error = std::strerror(errno);
      if (logs.out >= 0 && fd != &logs.out) close(logs.out);
      return InternalError("launch job " + spec.job_id + ": cannot open log file " + file + ": " +
                           error);
    }
  }
  const std::string header = "fullband: job " + spec.job_id + " attempt " +
                             std::to_string(spec.attempt) + ": " + command_line + "\n";
  if (write(logs.err, header.data(), header.size()) < 0) {
    FB_LOG(WARNING) << "cannot write to " << logs.base << ".err: " << std::strerror(errno);
  }
  return logs;
}

}  // namespace

// The program to start and its argv: the worker command, under mpirun unless the attempt runs
// it directly.
StatusOr<std::vector<std::string>> LocalLauncher::CommandLine(const LaunchSpec& spec,
                                                              const std::string& path, bool direct,
                                                              std::string* program) const {
  const std::string worker = ResolveProgram(spec.command[0], path);
  if (worker.empty()) {
    return InvalidArgumentError("launch job " + spec.job_id + ": worker program '" +
                                spec.command[0] + "' is not an executable file" +
                                (spec.command[0].find('/') == std::string::npos ? " in PATH" : ""));
  }
  std::vector<std::string> argv;
  *program = worker;
  if (!direct) {
    *program = ResolveProgram(options_.mpirun, path);
    if (program->empty()) {
      return UnavailableError("launch job " + spec.job_id + ": mpirun '" + options_.mpirun +
                              "' is not an executable file");
    }
    argv.push_back(options_.mpirun);
    // Note [Fast failure]: when a rank dies, mpirun sends the others SIGTERM and, by default,
    // waits a second before SIGKILL and its own exit; that second is most of the time the
    // coordinator needs to see the failure. A rank has nothing to do on the way out (a
    // checkpoint is committed whole or not at all), so the attempt ends at once. Options in
    // mpirun_args come after and may set it back.
    for (const char* a : {"--mca", "odls_base_sigkill_timeout", "0"}) argv.push_back(a);
    argv.insert(argv.end(), options_.mpirun_args.begin(), options_.mpirun_args.end());
    const int cores = options_.cores > 0 ? options_.cores : AvailableCores();
    if (spec.processes > cores) argv.push_back("--oversubscribe");
    argv.push_back("-np");
    argv.push_back(std::to_string(spec.processes));
  }
  argv.insert(argv.end(), spec.command.begin(), spec.command.end());
  return argv;
}

StatusOr<std::string> LocalLauncher::Launch(const LaunchSpec& spec) {
  auto fail = [this](Status status) {
    std::lock_guard lock(mu_);
    ++failures_;
    return status;
  };
  if (Status s = CheckLaunchSpec(spec); !s.ok()) return fail(s);
  // The environment (Note [Worker environment] in launcher.h).
  std::map<std::string, std::string> env = WorkerEnvironment(environ, options_.pass_env, spec.env);
  const bool direct = spec.processes == 1 && options_.direct_single_process;
  if (!direct && geteuid() == 0) {
    // Open MPI refuses to run as root without both (docs/PARALLEL.md).
    env["OMPI_ALLOW_RUN_AS_ROOT"] = "1";
    env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1";
  }
  const std::string path = env.count("PATH") ? env["PATH"] : "/usr/local/bin:/usr/bin:/bin";
  std::string program;
  StatusOr<std::vector<std::string>> argv = CommandLine(spec, path, direct, &program);
  if (!argv.ok()) return fail(argv.status());
  std::string command_line;
  for (const std::string& arg : *argv) command_line += (command_line.empty() ? "" : " ") + arg;
  StatusOr<LogFiles> logs = OpenLogs(spec, command_line);
  if (!logs.ok()) return fail(logs.status());

  pid_t pid = 0;
  const int rc = Spawn(program, *argv, env, logs->out, logs->err, /*new_session=*/true, &pid);
  close(logs->out);
  close(logs->err);
  if (rc != 0) {
    return fail(UnavailableError("launch job " + spec.job_id + ": cannot start " + program + ": " +
                                 std::strerror(rc)));
  }
  auto attempt = std::make_shared<Attempt>();
  attempt->pid = pid;
  attempt->err_log = logs->base + ".err";
  attempt->pidfd = PidfdOpen(pid);  // the child is unreaped, so its pid is still its own
  std::optional<ProcStat> stat = ReadProcStat(pid);  // unreaped, so /proc still has it
  const std::string handle =
      std::to_string(pid) + "." + std::to_string(stat ? stat->start_time : 0);
  std::lock_guard lock(mu_);
  attempts_[handle] = attempt;
  ++started_;
  FB_LOG(INFO) << "launched job " << spec.job_id << " attempt " << spec.attempt << " as " << handle
               << ": " << command_line;
  return handle;
}

std::shared_ptr<LocalLauncher::Attempt> LocalLauncher::Find(const std::string& handle) {
  std::lock_guard lock(mu_);
  auto it = attempts_.find(handle);
  return it == attempts_.end() ? nullptr : it->second;
}

void LocalLauncher::Finish(Attempt& attempt, bool block) {
  if (attempt.done) return;
  siginfo_t info{};
  if (waitid(P_PID, static_cast<id_t>(attempt.pid), &info,
             WEXITED | WNOWAIT | (block ? 0 : WNOHANG)) != 0) {
    attempt.state = {LaunchState::Phase::kLost, 0,
                     "exit status lost: the process was reaped outside the launcher"};
    attempt.done = true;
    return;
  }
  if (info.si_pid == 0) return;  // still running
  KillSession(attempt.pid);      // Note [Attempt cleanup]
  int status = 0;
  while (waitpid(attempt.pid, &status, 0) < 0 && errno == EINTR) {
  }
  LaunchState& s = attempt.state;
  if (WIFEXITED(status)) {
    s.phase = LaunchState::Phase::kExited;
    s.exit_code = WEXITSTATUS(status);
    s.detail = "exited with code " + std::to_string(s.exit_code);
  } else if (WIFSIGNALED(status)) {
    s.phase = LaunchState::Phase::kKilled;
    s.exit_code = 128 + WTERMSIG(status);
    s.detail = "killed by " + SignalName(WTERMSIG(status));
  }
  if (!attempt.kill_detail.empty()) {
    s.phase = LaunchState::Phase::kKilled;
    s.detail = attempt.kill_detail + " (" + s.detail + ")";
  } else if (s.exit_code != 0) {
    // The group may end before its rank 0 could report why (another rank's exit ends it):
    // the last error its ranks printed says.
    const std::string error = LastErrorLine(attempt.err_log);
    if (!error.empty()) s.detail += "; last error: " + error;
  }
  attempt.done = true;
}

StatusOr<LaunchState> LocalLauncher::Poll(const std::string& handle) {
  std::shared_ptr<Attempt> attempt = Find(handle);
  if (attempt == nullptr) return NotFoundError("launcher local: no attempt " + handle);
  std::unique_lock lock(attempt->mu, std::try_to_lock);
  if (!lock.owns_lock()) return LaunchState{LaunchState::Phase::kRunning, 0, "being killed"};
  Finish(*attempt, /*block=*/false);
  return attempt->state;
}

StatusOr<LaunchState> LocalLauncher::Wait(const std::string& handle,
                                          std::chrono::milliseconds timeout) {
  std::shared_ptr<Attempt> attempt = Find(handle);
  if (attempt == nullptr) return NotFoundError("launcher local: no attempt " + handle);
  const auto deadline = Clock::now() + timeout;
  while (true) {
    {
      std::lock_guard lock(attempt->mu);
      Finish(*attempt, /*block=*/false);
      if (attempt->done || Clock::now() >= deadline) return attempt->state;
    }
    // Unlocked, so that Poll stays non-blocking. The pidfd names this very process even once
    // its pid has been reaped and reused; without one, look again every 10 ms.
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (attempt->pidfd >= 0) {
      pollfd p = {attempt->pidfd, POLLIN, 0};
      poll(&p, 1, static_cast<int>(std::max<int64_t>(left.count(), 0)));
    } else {
      std::this_thread::sleep_for(std::min(left, std::chrono::milliseconds(10)));
    }
  }
}

Status LocalLauncher::Kill(const std::string& handle) {
  std::shared_ptr<Attempt> attempt = Find(handle);
  const auto grace = options_.kill_grace;
  constexpr std::chrono::seconds kAfterSigkill(10);
  if (attempt == nullptr) {
    // Perhaps an attempt of an earlier coordinator process on this machine.
    const size_t dot = handle.find('.');
    pid_t pid = 0;
    uint64_t start_time = 0;
    try {
      size_t used = 0;
      pid = static_cast<pid_t>(std::stoll(handle.substr(0, dot), &used));
      if (dot == std::string::npos || used != dot || pid <= 1) throw std::invalid_argument("");
      start_time = std::stoull(handle.substr(dot + 1), &used);
      if (used != handle.size() - dot - 1) throw std::invalid_argument("");
    } catch (const std::exception&) {
      return NotFoundError("launcher local: '" + handle + "' is not a local launcher handle");
    }
    std::optional<ProcStat> stat = ReadProcStat(pid);
    if (!stat || stat->start_time != start_time || stat->session != pid) {
      return OkStatus();  // gone (or the pid now belongs to someone else)
    }
    FB_LOG(INFO) << "killing attempt " << handle << " of an earlier coordinator process";
    {
      std::lock_guard lock(mu_);
      ++kills_;
    }
    SignalSession(pid, SIGTERM);
    const bool ended = WaitGone(pid, start_time, grace);
    KillSession(pid);
    if (!ended && !WaitGone(pid, start_time, kAfterSigkill)) {
      return InternalError("launcher local: attempt " + handle + " survived SIGKILL");
    }
    return OkStatus();
  }

  std::lock_guard attempt_lock(attempt->mu);
  Finish(*attempt, /*block=*/false);
  if (attempt->done) return OkStatus();
  {
    std::lock_guard lock(mu_);
    ++kills_;
  }
  SignalSession(attempt->pid, SIGTERM);
  if (WaitExited(attempt->pid, attempt->pidfd, grace)) {
    attempt->kill_detail = "ended by Kill with SIGTERM";
  } else {
    KillSession(attempt->pid);
    attempt->kill_detail =
        "killed by SIGKILL after the " + std::to_string(grace.count()) + " ms grace";
    if (!WaitExited(attempt->pid, attempt->pidfd, kAfterSigkill)) {
      return InternalError("launcher local: attempt " + handle + " survived SIGKILL");
    }
  }
  Finish(*attempt, /*block=*/true);
  return OkStatus();
}

LauncherCounts LocalLauncher::Counts() const {
  std::lock_guard lock(mu_);
  LauncherCounts counts{started_, failures_, kills_, 0};
  for (const auto& [handle, attempt] : attempts_) {
    std::unique_lock attempt_lock(attempt->mu, std::try_to_lock);
    counts.running += !attempt_lock.owns_lock() || !attempt->done;
  }
  return counts;
}

}  // namespace fullband::coordinator

// The launchers' shared pieces (launcher.h).
#include "coordinator/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>

#include "coordinator/metrics_http.h"

namespace fullband::coordinator {

Status CheckLaunchSpec(const LaunchSpec& spec) {
  const std::string what = "launch job " + spec.job_id + ": ";
  if (spec.command.empty() || spec.command[0].empty()) {
    return InvalidArgumentError(what + "the worker command is empty");
  }
  if (spec.processes < 1) {
    return InvalidArgumentError(what + "processes is " + std::to_string(spec.processes) +
                                ", must be at least 1");
  }
  if (spec.attempt < 0) return InvalidArgumentError(what + "attempt is negative");
  if (spec.log_dir.empty()) return InvalidArgumentError(what + "log_dir is empty");
  return OkStatus();
}

std::string ResolveProgram(const std::string& program, const std::string& path) {
  auto executable = [](const std::string& file) {
    struct stat st;
    return stat(file.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(file.c_str(), X_OK) == 0;
  };
  if (program.find('/') != std::string::npos) return executable(program) ? program : "";
  std::istringstream dirs(path);
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string file = (dir.empty() ? "." : dir) + "/" + program;
    if (executable(file)) return file;
  }
  return "";
}

std::map<std::string, std::string> EnvironmentMap(const char* const* environ) {
  std::map<std::string, std::string> env;
  for (const char* const* e = environ; *e != nullptr; ++e) {
    const std::string_view entry = *e;
    const size_t eq = entry.find('=');
    if (eq != std::string_view::npos) env[std::string(entry.substr(0, eq))] = entry.substr(eq + 1);
  }
  return env;
}

std::map<std::string, std::string> WorkerEnvironment(
    const char* const* environ, const std::vector<std::string>& pass_env,
    const std::map<std::string, std::string>& spec_env) {
  std::map<std::string, std::string> env;
  for (auto& [name, value] : EnvironmentMap(environ)) {
    bool allowed = std::find(pass_env.begin(), pass_env.end(), name) != pass_env.end();
    for (const char* n : kWorkerEnvNames) allowed = allowed || name == n;
    for (const char* p : kWorkerEnvPrefixes) allowed = allowed || name.starts_with(p);
    if (allowed) env[name] = std::move(value);
  }
  for (const auto& [key, value] : spec_env) env[key] = value;
  return env;
}

void WriteLauncherMetrics(const std::vector<std::pair<std::string, LauncherCounts>>& launchers,
                          PrometheusWriter& writer) {
  const auto family = [&](const char* name, MetricType type, const char* help,
                          int64_t LauncherCounts::*value) {
    writer.Family(name, type, help);
    for (const auto& [launcher, counts] : launchers) {
      writer.Sample({{"launcher", launcher}}, static_cast<double>(counts.*value));
    }
  };
  family("fullband_launcher_attempts_started_total", MetricType::kCounter,
         "Worker attempts started.", &LauncherCounts::started);
  family("fullband_launcher_launch_failures_total", MetricType::kCounter,
         "Launches refused or failed before a process started.", &LauncherCounts::failures);
  family("fullband_launcher_kills_total", MetricType::kCounter, "Attempts ended by Kill.",
         &LauncherCounts::kills);
  family("fullband_launcher_attempts_running", MetricType::kGauge,
         "Attempts started and not yet seen to end.", &LauncherCounts::running);
}

int Spawn(const std::string& program, std::vector<std::string> argv,
          const std::map<std::string, std::string>& env, int out_fd, int err_fd, bool new_session,
          pid_t* pid) {
  std::vector<std::string> env_strings;
  for (const auto& [key, value] : env) env_strings.push_back(key + "=" + value);
  std::vector<char*> c_env, c_argv;
  for (std::string& e : env_strings) c_env.push_back(e.data());
  for (std::string& a : argv) c_argv.push_back(a.data());
  c_env.push_back(nullptr);
  c_argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_fd, 1);
  posix_spawn_file_actions_adddup2(&actions, err_fd, 2);
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, (new_session ? POSIX_SPAWN_SETSID : 0) | POSIX_SPAWN_SETSIGMASK |
                                      POSIX_SPAWN_SETSIGDEF);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  const int rc = posix_spawn(pid, program.c_str(), &actions, &attr, c_argv.data(), c_env.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  return rc;
}

namespace {

constexpr size_t kMaxProgramOutput = 1 << 20;

// Reads what is ready on `fd` into `into` (keeping at most kMaxProgramOutput bytes); false at
// the end of the stream.
bool Drain(int fd, std::string& into) {
  char buffer[4096];
  const ssize_t n = read(fd, buffer, sizeof(buffer));
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
  if (n <= 0) return false;
  into.append(
      buffer,
      static_cast<size_t>(std::min<ssize_t>(
          n, static_cast<ssize_t>(kMaxProgramOutput - std::min(into.size(), kMaxProgramOutput)))));
  return true;
}

}  // namespace

StatusOr<ProgramOutput> RunProgram(const std::string& program, const std::vector<std::string>& argv,
                                   const std::map<std::string, std::string>& env,
                                   std::chrono::milliseconds timeout) {
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0)
    return UnavailableError("pipe: " + std::string(std::strerror(errno)));
  if (pipe2(err, O_CLOEXEC) != 0) {
    close(out[0]);
    close(out[1]);
    return UnavailableError("pipe: " + std::string(std::strerror(errno)));
  }
  pid_t pid = 0;
  const int rc = Spawn(program, argv, env, out[1], err[1], /*new_session=*/false, &pid);
  close(out[1]);
  close(err[1]);
  if (rc != 0) {
    close(out[0]);
    close(err[0]);
    return UnavailableError("cannot start " + program + ": " + std::strerror(rc));
  }
  ProgramOutput result;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  std::string* into[2] = {&result.out, &result.err};
  while (fds[0].fd >= 0 || fds[1].fd >= 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      result.timed_out = true;
      kill(pid, SIGKILL);
      break;
    }
    if (poll(fds, 2, static_cast<int>(left.count())) < 0 && errno != EINTR) break;
    for (int k = 0; k < 2; ++k) {
      if (fds[k].fd >= 0 && (fds[k].revents & (POLLIN | POLLHUP | POLLERR)) &&
          !Drain(fds[k].fd, *into[k])) {
        close(fds[k].fd);
        fds[k].fd = -1;
      }
    }
  }
  for (pollfd& p : fds) {
    if (p.fd >= 0) close(p.fd);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!result.timed_out && WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  return result;
}

}  // namespace fullband::coordinator

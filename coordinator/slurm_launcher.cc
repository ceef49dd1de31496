// SlurmLauncher (slurm_launcher.h): sbatch, squeue, scancel, and sacct or the completion log.
#include "coordinator/slurm_launcher.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "common/logging.h"
#include "coordinator/metrics_http.h"

extern char** environ;

namespace fullband::coordinator {
namespace {

using SteadyClock = std::chrono::steady_clock;

// A Slurm job id: digits only (a federated "12;cluster" is cut at the ';' before this).
bool IsJobId(std::string_view s) {
  return !s.empty() && s.size() <= 20 && s.find_first_not_of("0123456789") == std::string::npos;
}

std::string Trim(std::string_view s) {
  const size_t begin = s.find_first_not_of(" \t\r\n");
  if (begin == std::string_view::npos) return "";
  return std::string(s.substr(begin, s.find_last_not_of(" \t\r\n") - begin + 1));
}

// `word` as one word of a bash command line.
std::string ShellQuote(const std::string& word) {
  if (!word.empty() &&
      word.find_first_not_of(
          "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./=:,@%+-") ==
          std::string::npos) {
    return word;
  }
  std::string quoted = "'";
  for (char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

std::string Absolute(const std::string& path) {
  std::error_code ec;
  return std::filesystem::absolute(path, ec).lexically_normal().string();
}

// Slurm's messages when it cannot be reached, as opposed to a job it refuses.
bool Unreachable(const ProgramOutput& r) {
  for (const char* words :
       {"Unable to contact slurm controller", "Socket timed out", "Connection refused",
        "temporarily unable", "Zero Bytes were transmitted", "Communication connection failure"}) {
    if (r.err.find(words) != std::string::npos) return true;
  }
  return r.timed_out;
}

bool UnknownJob(const ProgramOutput& r) {
  return r.err.find("Invalid job id") != std::string::npos;
}

// The first line of a command's stderr, for errors.
std::string FirstLine(const std::string& text) { return Trim(text.substr(0, text.find('\n'))); }

bool IsFinal(const LaunchState& s) {
  return s.phase != LaunchState::Phase::kPending && s.phase != LaunchState::Phase::kRunning;
}

}  // namespace

std::string SlurmJobName(const LaunchSpec& spec) {
  return "fullband-" + spec.job_id + "-" + std::to_string(spec.attempt);
}

StatusOr<std::string> SbatchScript(const LaunchSpec& spec, const std::string& working_dir) {
  const std::string base = Absolute(spec.log_dir) + "/attempt-" + std::to_string(spec.attempt);
  for (const std::string* path : {&base, &working_dir}) {
    if (path->find_first_of(" \t\n\r'\"\\") != std::string::npos) {
      return InvalidArgumentError("launch job " + spec.job_id + ": the path '" + *path +
                                  "' holds whitespace, a quote or a backslash, which an #SBATCH "
                                  "line cannot carry");
    }
  }
  const SlurmConfig& c = spec.slurm;
  std::vector<std::string> options = {"--job-name=" + SlurmJobName(spec),
                                      "--output=" + base + ".out",
                                      "--error=" + base + ".err",
                                      "--open-mode=append",
                                      "--chdir=" + working_dir,
                                      "--ntasks=" + std::to_string(spec.processes),
                                      "--no-requeue",
                                      "--export=ALL"};
  if (c.nodes > 0) options.push_back("--nodes=" + std::to_string(c.nodes));
  if (c.tasks_per_node > 0)
    options.push_back("--ntasks-per-node=" + std::to_string(c.tasks_per_node));
  if (c.cpus_per_task > 0) options.push_back("--cpus-per-task=" + std::to_string(c.cpus_per_task));
  if (c.gpus_per_node > 0) options.push_back("--gres=gpu:" + std::to_string(c.gpus_per_node));
  if (!c.time_limit.empty()) options.push_back("--time=" + c.time_limit);
  if (!c.partition.empty()) options.push_back("--partition=" + c.partition);
  if (!c.account.empty()) options.push_back("--account=" + c.account);
  if (!c.qos.empty()) options.push_back("--qos=" + c.qos);

  std::ostringstream s;
  s << "#!/bin/bash\n"
    << "# fullband job " << spec.job_id << ", attempt " << spec.attempt
    << ", written by the coordinator (docs/SLURM.md) and submitted as\n#   sbatch --parsable";
  for (const std::string& a : c.sbatch_args) s << " " << ShellQuote(a);
  s << " " << base << ".sbatch\n"
    << "# The workers' environment (FULLBAND_JOB_ID, FULLBAND_WORKER_TOKEN, ...) is sbatch's own,\n"
    << "# exported to the job (--export=ALL); it is never written here.\n";
  for (const std::string& o : options) s << "#SBATCH " << o << "\n";
  s << "exec srun --mpi=pmix --kill-on-bad-exit=1";
  for (const std::string& a : c.srun_args) s << " " << ShellQuote(a);
  for (const std::string& a : spec.command) s << " " << ShellQuote(a);
  s << "\n";
  return s.str();
}

LaunchState SlurmLaunchState(const std::string& job_id, std::string_view state,
                             std::string_view reason, std::string_view exit_code) {
  using Phase = LaunchState::Phase;
  const std::string name = Trim(state.substr(0, state.find(' ')));  // "CANCELLED by 0"
  LaunchState s;
  s.detail = "Slurm job " + job_id + " " + name;
  const std::string why = Trim(reason);
  if (!why.empty() && why != "None" && why != "(null)") s.detail += " (" + why + ")";
  static const std::set<std::string, std::less<>> kPending = {
      "PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"};
  static const std::set<std::string, std::less<>> kExited = {"COMPLETED", "FAILED"};
  static const std::set<std::string, std::less<>> kKilled = {
      "CANCELLED", "TIMEOUT",       "NODE_FAIL", "PREEMPTED",   "BOOT_FAIL",
      "DEADLINE",  "OUT_OF_MEMORY", "REVOKED",   "SPECIAL_EXIT"};
  if (kPending.count(name)) {
    s.phase = Phase::kPending;
  } else if (kExited.count(name)) {
    s.phase = Phase::kExited;
    s.exit_code = std::atoi(std::string(exit_code.substr(0, exit_code.find(':'))).c_str());
  } else if (kKilled.count(name)) {
    s.phase = Phase::kKilled;
  } else {
    s.phase = Phase::kRunning;  // RUNNING, COMPLETING, SUSPENDED, STAGE_OUT, SIGNALING, ...
  }
  return s;
}

std::optional<LaunchState> FindInCompletionLog(std::string_view log, const std::string& job_id) {
  const std::string key = "JobId=" + job_id + " ";
  std::optional<LaunchState> found;
  std::istringstream lines{std::string(log)};
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with(key)) continue;
    std::map<std::string, std::string> fields;
    std::istringstream words(line);
    for (std::string word; words >> word;) {
      const size_t eq = word.find('=');
      if (eq != std::string::npos) fields[word.substr(0, eq)] = word.substr(eq + 1);
    }
    found = SlurmLaunchState(job_id, fields["JobState"], "", fields["ExitCode"]);
  }
  return found;
}

SlurmLauncher::SlurmLauncher(SlurmLauncherOptions options)
    : options_(std::move(options)), own_env_(EnvironmentMap(environ)) {}

StatusOr<ProgramOutput> SlurmLauncher::Slurm(const std::string& command,
                                             std::vector<std::string> args,
                                             const std::map<std::string, std::string>* env) {
  const char* path = std::getenv("PATH");
  const std::string program =
      options_.bin_dir.empty()
          ? ResolveProgram(command, path ? path : "/usr/local/bin:/usr/bin:/bin")
          : ResolveProgram(options_.bin_dir + "/" + command, "");
  if (program.empty()) {
    return UnavailableError(command + " not found " +
                            (options_.bin_dir.empty() ? "in PATH" : "in " + options_.bin_dir) +
                            ": is the Slurm client installed? (slurm_bin_dir in coordinator.yaml)");
  }
  if (env == nullptr) env = &own_env_;
  args.insert(args.begin(), command);
  {
    std::lock_guard lock(mu_);
    ++commands_[command];
  }
  return RunProgram(program, args, *env, options_.command_timeout);
}

StatusOr<std::map<std::string, LaunchState>> SlurmLauncher::Squeue(
    const std::vector<std::string>& ids) {
  std::string list;
  for (const std::string& id : ids) list += (list.empty() ? "" : ",") + id;
  FB_ASSIGN_OR_RETURN(ProgramOutput r,
                      Slurm("squeue", {"--noheader", "--states=all", "--jobs=" + list,
                                       "--Format=JobID:|,State:|,Reason:|,exit_code:|"}));
  std::map<std::string, LaunchState> states;
  if (r.exit_code != 0) {
    if (UnknownJob(r)) return states;  // none of them is known any more
    return UnavailableError("squeue: " + (r.timed_out ? "timed out" : FirstLine(r.err)));
  }
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    std::vector<std::string> f;
    std::istringstream fields(line);
    for (std::string field; std::getline(fields, field, '|');) f.push_back(Trim(field));
    if (f.size() < 4 || !IsJobId(f[0])) continue;  // array or het job parts: not ours
    // squeue's exit_code is the raw wait status; the others print "code:signal".
    const int status = std::atoi(f[3].c_str());
    const std::string code = std::to_string(status >> 8) + ":" + std::to_string(status & 0x7f);
    states[f[0]] = SlurmLaunchState(f[0], f[1], f[2], code);
  }
  return states;
}

LaunchState SlurmLauncher::Finished(const std::string& id) {
  bool accounting = false, known = false;
  std::string log;
  {
    std::lock_guard lock(mu_);
    known = accounting_.has_value();
    accounting = accounting_.value_or(false);
    log = completion_log_;
  }
  if (!known) {  // ask once (again only if scontrol failed)
    StatusOr<ProgramOutput> r = Slurm("scontrol", {"show", "config"});
    if (r.ok() && r->exit_code == 0) {
      std::istringstream lines(r->out);
      std::string comp_type, comp_loc;
      for (std::string line; std::getline(lines, line);) {
        const size_t eq = line.find('=');
        if (eq == std::string::npos) continue;
        const std::string key = Trim(line.substr(0, eq)), value = Trim(line.substr(eq + 1));
        if (key == "AccountingStorageType") accounting = value != "accounting_storage/none";
        if (key == "JobCompType") comp_type = value;
        if (key == "JobCompLoc") comp_loc = value;
      }
      if (comp_type == "jobcomp/filetxt") log = comp_loc;
      std::lock_guard lock(mu_);
      accounting_ = accounting;
      completion_log_ = log;
    }
  }
  if (accounting) {
    StatusOr<ProgramOutput> r = Slurm("sacct", {"--noheader", "--parsable2", "--allocations",
                                                "--jobs=" + id, "--format=State,ExitCode,Reason"});
    if (r.ok() && r->exit_code == 0 && !Trim(r->out).empty()) {
      std::vector<std::string> f;
      std::istringstream fields(r->out.substr(0, r->out.find('\n')));
      for (std::string field; std::getline(fields, field, '|');) f.push_back(field);
      f.resize(3);
      return SlurmLaunchState(id, f[0], f[2], f[1]);
    }
  }
  if (!log.empty()) {
    std::ifstream in(log);
    std::stringstream text;
    text << in.rdbuf();
    if (std::optional<LaunchState> s = FindInCompletionLog(text.str(), id)) return *s;
  }
  LaunchState lost;
  lost.phase = LaunchState::Phase::kLost;
  lost.detail = "Slurm job " + id + " is known neither to squeue nor to " +
                (accounting    ? std::string("sacct")
                 : log.empty() ? "a completion log"
                               : log);
  return lost;
}

std::optional<std::string> SlurmLauncher::FindLiveJob(const std::string& name,
                                                      const std::string& script_path) {
  StatusOr<ProgramOutput> r =
      Slurm("squeue", {"--noheader", "--me", "--name=" + name, "--format=%i|%o"});
  if (!r.ok() || r->exit_code != 0) return std::nullopt;
  std::istringstream lines(r->out);
  for (std::string line; std::getline(lines, line);) {
    const size_t bar = line.find('|');
    if (bar == std::string::npos) continue;
    // Another coordinator of this user may run a job of the same name; only ours runs this
    // script (squeue's %o is the path sbatch was given).
    const std::string id = Trim(line.substr(0, bar));
    if (IsJobId(id) && Trim(line.substr(bar + 1)) == script_path) return id;
  }
  return std::nullopt;
}

StatusOr<std::string> SlurmLauncher::Submit(const LaunchSpec& spec, const std::string& script_path,
                                            const std::map<std::string, std::string>& env) {
  const std::string what = "job " + spec.job_id + " attempt " + std::to_string(spec.attempt);
  std::vector<std::string> args = {"--parsable"};
  args.insert(args.end(), spec.slurm.sbatch_args.begin(), spec.slurm.sbatch_args.end());
  args.push_back(script_path);
  std::chrono::milliseconds wait = options_.submit_backoff;
  std::string last;
  for (int attempt = 1; attempt <= options_.submit_attempts; ++attempt) {
    FB_ASSIGN_OR_RETURN(ProgramOutput r, Slurm("sbatch", args, &env));
    const std::string id = Trim(r.out.substr(0, r.out.find_first_of(";\n")));
    if (r.exit_code == 0 && IsJobId(id)) return id;
    if (!Unreachable(r)) {
      return FailedPreconditionError(
          "Slurm rejected it: " +
          (r.err.empty() ? "sbatch printed '" + Trim(r.out) + "'" : FirstLine(r.err)));
    }
    last = r.timed_out ? "sbatch timed out" : FirstLine(r.err);
    FB_LOG(WARNING) << "sbatch of " << what << " (try " << attempt << " of "
                    << options_.submit_attempts << "): " << last;
    std::this_thread::sleep_for(wait);  // back-off before asking an unreachable Slurm again
    wait *= 2;
    // A submission whose answer was lost is there already: never submit it twice, and never
    // leave it running unwatched after the last try.
    if (std::optional<std::string> id = FindLiveJob(SlurmJobName(spec), script_path)) return *id;
  }
  return UnavailableError("Slurm did not accept it after " +
                          std::to_string(options_.submit_attempts) + " tries: " + last);
}

StatusOr<std::string> SlurmLauncher::Launch(const LaunchSpec& spec) {
  auto fail = [this](Status status) {
    std::lock_guard lock(mu_);
    ++failures_;
    return status;
  };
  if (Status s = CheckLaunchSpec(spec); !s.ok()) return fail(s);
  std::map<std::string, std::string> env = WorkerEnvironment(environ, options_.pass_env, spec.env);
  for (const char* name : {"SLURM_CONF", "SLURM_CLUSTERS"}) {  // which Slurm to submit to
    if (const char* value = std::getenv(name)) env[name] = value;
  }
  std::error_code ec;
  std::filesystem::create_directories(spec.log_dir, ec);
  if (ec) {
    return fail(InternalError("launch job " + spec.job_id + ": cannot create log directory " +
                              spec.log_dir + ": " + ec.message()));
  }
  const std::string working_dir = options_.working_dir.empty()
                                      ? std::filesystem::current_path(ec).string()
                                      : options_.working_dir;
  StatusOr<std::string> script = SbatchScript(spec, working_dir);
  if (!script.ok()) return fail(script.status());
  const std::string path =
      Absolute(spec.log_dir) + "/attempt-" + std::to_string(spec.attempt) + ".sbatch";
  {
    std::ofstream out(path, std::ios::trunc);
    out << *script;
    if (!out.flush())
      return fail(InternalError("launch job " + spec.job_id + ": cannot write " + path));
  }
  StatusOr<std::string> id = Submit(spec, path, env);
  if (!id.ok()) {
    return fail(Status(id.status().code(), "launch job " + spec.job_id + " attempt " +
                                               std::to_string(spec.attempt) + ": " +
                                               id.status().message()));
  }
  std::lock_guard lock(mu_);
  ++started_;
  LaunchState submitted;
  submitted.phase = LaunchState::Phase::kPending;
  submitted.detail = "Slurm job " + *id + " submitted";
  known_[*id] = {submitted, SteadyClock::now()};
  FB_LOG(INFO) << "launched job " << spec.job_id << " attempt " << spec.attempt << " as Slurm job "
               << *id << " (" << path << ")";
  return *id;
}

StatusOr<LaunchState> SlurmLauncher::Poll(const std::string& handle) {
  if (!IsJobId(handle)) return NotFoundError("'" + handle + "' is not a Slurm job id");
  const auto now = SteadyClock::now();
  std::vector<std::string> ask;
  {
    std::lock_guard lock(mu_);
    Known& k = known_[handle];
    k.polled = now;
    const bool stale = now - last_squeue_ >= options_.poll_interval;
    if (k.state && (IsFinal(*k.state) || !stale)) return *k.state;
    for (auto it = known_.begin(); it != known_.end();) {  // forget what nobody asks about
      if (now - it->second.polled > std::chrono::minutes(10)) {
        it = known_.erase(it);
        continue;
      }
      if (now - it->second.polled < std::chrono::minutes(1) &&
          !(it->second.state && IsFinal(*it->second.state))) {
        ask.push_back(it->first);
      }
      ++it;
    }
    last_squeue_ = now;
  }
  FB_ASSIGN_OR_RETURN(auto states, Squeue(ask));
  for (const std::string& id : ask) {
    if (!states.count(id)) states[id] = Finished(id);
  }
  std::lock_guard lock(mu_);
  for (auto& [id, state] : states) known_[id].state = state;
  return *known_[handle].state;
}

Status SlurmLauncher::Kill(const std::string& handle) {
  if (!IsJobId(handle)) return NotFoundError("'" + handle + "' is not a Slurm job id");
  FB_ASSIGN_OR_RETURN(ProgramOutput r, Slurm("scancel", {handle}));
  if (r.exit_code != 0 && !UnknownJob(r)) {
    return UnavailableError("scancel " + handle + ": " +
                            (r.timed_out ? "timed out" : FirstLine(r.err)));
  }
  {
    std::lock_guard lock(mu_);
    ++kills_;
  }
  // Confirmed when squeue no longer shows it live (ended, or forgotten by Slurm).
  const auto deadline = SteadyClock::now() + options_.cancel_timeout;
  std::chrono::milliseconds wait{100};
  while (true) {
    StatusOr<std::map<std::string, LaunchState>> states = Squeue({handle});
    if (states.ok()) {
      auto it = states->find(handle);
      if (it == states->end() || IsFinal(it->second)) {
        LaunchState ended = it == states->end() ? Finished(handle) : it->second;  // takes mu_
        std::lock_guard lock(mu_);
        known_[handle].state = std::move(ended);  // Poll need not ask again
        return OkStatus();
      }
    }
    if (SteadyClock::now() + wait > deadline) {
      return InternalError("Slurm job " + handle + " still runs " +
                           std::to_string(options_.cancel_timeout.count() / 1000) +
                           " s after scancel" +
                           (states.ok() ? "" : " (" + states.status().message() + ")"));
    }
    std::this_thread::sleep_for(wait);  // Slurm offers no wait for a job's end
    wait = std::min(wait * 2, std::chrono::milliseconds(1000));
  }
}

LauncherCounts SlurmLauncher::Counts() const {
  std::lock_guard lock(mu_);
  LauncherCounts counts{started_, failures_, kills_, 0};
  for (const auto& [id, k] : known_) counts.running += k.state && !IsFinal(*k.state);
  return counts;
}

void SlurmLauncher::RenderCommandMetrics(PrometheusWriter& writer) const {
  std::lock_guard lock(mu_);
  writer.Family(
      "fullband_launcher_slurm_commands_total", MetricType::kCounter,
      "Slurm commands the slurm launcher ran (sbatch, squeue, scancel, sacct, scontrol).");
  for (const auto& [command, n] : commands_) {
    writer.Sample({{"command", command}}, static_cast<double>(n));
  }
}

}  // namespace fullband::coordinator

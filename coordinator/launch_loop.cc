// The Coordinator's launch loop (coordinator.h): Tick launches PENDING jobs and relaunches
// RESTARTING ones, fails jobs past a deadline, and asks the launchers how their worker groups
// are; Run makes the launcher calls, outside the mutex. The state changes it makes go through
// the state machine of coordinator.cc (Fail, Persist).
#include <filesystem>
#include <iomanip>
#include <iterator>
#include <sstream>

#include "common/logging.h"
#include "coordinator/coordinator.h"
#include "coordinator/coordinator_job.h"

namespace fullband::coordinator {
namespace {

template <typename T>
void Append(std::vector<T>& to, std::vector<T> more) {
  to.insert(to.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
}

}  // namespace

void Coordinator::Tick() {
  std::vector<Action> actions;
  std::vector<Poll> polls;
  {
    std::lock_guard<std::mutex> lock(mu_);
    actions.swap(deferred_);  // kills decided by RPCs since the last tick come first
    const double now = clock_->NowSeconds();
    for (auto& [id, job] : jobs_) Append(actions, Advance(*job, now, polls));
  }
  Run(std::move(actions));

  // Worker groups that exited or vanished have failed (unless the job is done); queued ones wait.
  std::vector<std::pair<Poll, LaunchState>> seen;
  for (const Poll& p : polls) {
    StatusOr<LaunchState> s = p.launcher->Poll(p.handle);
    if (!s.ok()) continue;  // e.g. a handle of a previous coordinator process: heartbeats decide
    seen.emplace_back(p, *s);
  }
  Run(Observe(seen));
}

void Coordinator::Defer(std::vector<Action> actions) { Append(deferred_, std::move(actions)); }

std::vector<Coordinator::Action> Coordinator::Advance(Job& job, double now,
                                                      std::vector<Poll>& polls) {
  if (job.revoke_token_at > 0 && now >= job.revoke_token_at) {  // Note [Token after the end]
    if (options_.revoke_worker_tokens) options_.revoke_worker_tokens(job.id);
    job.worker_token.clear();
    job.worker_token_digest.clear();
    job.revoke_token_at = 0;
    Persist(job, now);
  }
  // Deadlines first, so that a failed group is relaunched in this same tick when its back-off
  // is zero: detection and relaunch take at most timeout + one tick.
  std::vector<Action> actions = CheckDeadlines(job, now, polls);
  if (job.state == JobState::kPending) {
    actions.push_back(Launch(job, now));
  } else if (job.state == JobState::kRestarting && now >= job.restart_at_unix) {
    job.attempt += 1;
    actions.push_back(Launch(job, now));
  }
  return actions;
}

std::vector<Coordinator::Action> Coordinator::CheckDeadlines(Job& job, double now,
                                                             std::vector<Poll>& polls) {
  if (job.state == JobState::kLaunching && !job.queued &&
      now - job.launched_at > options_.launch_timeout_seconds) {
    return Fail(job,
                "worker group did not register within " +
                    std::to_string(options_.launch_timeout_seconds) + " s",
                now);
  }
  if (job.state == JobState::kRunning &&
      now - job.last_heartbeat > options_.heartbeat_timeout_seconds) {
    return Fail(job,
                "no heartbeat for " + std::to_string(now - job.last_heartbeat) + " s (timeout " +
                    std::to_string(options_.heartbeat_timeout_seconds) + " s)",
                now);
  }
  if ((job.state == JobState::kLaunching || job.state == JobState::kRunning) &&
      !job.launch_handle.empty()) {
    polls.push_back(
        {job.id, job.attempt, launchers_.at(job.spec.config.launcher.kind), job.launch_handle});
  }
  return {};
}

Coordinator::Action Coordinator::Launch(Job& job, double now) {
  Action a;
  a.kind = Action::Kind::kLaunch;
  a.job_id = job.id;
  a.attempt = job.attempt;
  a.launcher = launchers_.at(job.spec.config.launcher.kind);
  a.spec = LaunchSpecFor(job);
  job.state = JobState::kLaunching;
  job.launched_at = now;
  job.pending_since = 0;
  job.queued = false;
  if (job.wall_start_unix == 0) job.wall_start_unix = now;
  Persist(job, now);
  return a;
}

LaunchSpec Coordinator::LaunchSpecFor(Job& job) {
  const Config& c = job.spec.config;
  LaunchSpec spec;
  spec.job_id = job.id;
  spec.attempt = job.attempt;
  spec.processes = c.launcher.processes > 0 ? c.launcher.processes : c.parallel.tp * c.parallel.dp;
  spec.command = c.launcher.command;
  spec.command.insert(spec.command.end(), c.launcher.extra_args.begin(),
                      c.launcher.extra_args.end());
  spec.env[kJobIdEnv] = job.id;
  spec.env[kAttemptEnv] = std::to_string(job.attempt);
  if (!options_.advertise_address.empty()) spec.env[kCoordinatorEnv] = options_.advertise_address;
  if (!options_.worker_tls_ca.empty()) spec.env[kTlsCaEnv] = options_.worker_tls_ca;
  if (options_.mint_worker_token) {
    if (!job.worker_token_digest.empty() && options_.revoke_worker_tokens) {
      options_.revoke_worker_tokens(job.id);  // the previous attempt's
    }
    CoordinatorOptions::MintedToken minted = options_.mint_worker_token(job.id);
    job.worker_token = std::move(minted.token);
    job.worker_token_digest = std::move(minted.digest);
    if (!job.worker_token.empty()) spec.env[kWorkerTokenEnv] = job.worker_token;
  }
  spec.log_dir = options_.jobs_dir + "/" + job.id;  // attempt-<n>.out|.err inside
  std::error_code ec;  // the workers' checkpoint root when checkpoint.dir is ""
  spec.env[kJobDirEnv] = std::filesystem::absolute(spec.log_dir, ec).lexically_normal().string();
  spec.slurm = c.launcher.slurm;
  return spec;
}

std::vector<Coordinator::Action> Coordinator::Observe(
    const std::vector<std::pair<Poll, LaunchState>>& seen) {
  std::vector<Action> actions;
  std::lock_guard<std::mutex> lock(mu_);
  const double now = clock_->NowSeconds();
  for (const auto& [p, state] : seen) {
    auto it = jobs_.find(p.job_id);
    if (it == jobs_.end()) continue;
    Job& job = *it->second;
    if (job.attempt != p.attempt || job.launch_handle != p.handle) continue;
    if (job.state != JobState::kLaunching && job.state != JobState::kRunning) continue;
    Append(actions, Observe(job, state, now));
  }
  return actions;
}

std::vector<Coordinator::Action> Coordinator::Observe(Job& job, const LaunchState& state,
                                                      double now) {
  if (state.phase == LaunchState::Phase::kRunning) {
    if (job.queued) job.launched_at = now;  // out of the queue: the launch deadline starts
    job.queued = false;
    return {};
  }
  if (state.phase == LaunchState::Phase::kPending) return Pending(job, state, now);
  std::string why = "worker group ended";
  if (state.phase == LaunchState::Phase::kExited) {
    why += " with exit code " + std::to_string(state.exit_code);
  }
  if (!state.detail.empty()) why += " (" + state.detail + ")";
  job.launch_handle.clear();  // nothing left to kill
  return Fail(job, why, now);
}

// Note [Pending attempts]: a scheduler (Slurm) may queue an attempt for long before any
// process starts. The launch deadline (launch_timeout_seconds) is for a started group to
// register, so it counts from when the attempt is seen to leave the queue; the queue has its own
// limit, launcher.slurm.pending_timeout_seconds (0: none).
std::vector<Coordinator::Action> Coordinator::Pending(Job& job, const LaunchState& state,
                                                      double now) {
  if (!job.queued) job.pending_since = now;
  job.queued = true;
  const double limit = job.spec.config.launcher.slurm.pending_timeout_seconds;
  if (limit <= 0 || now - job.pending_since <= limit) return {};
  std::ostringstream why;
  why << std::fixed << std::setprecision(1) << "still queued after " << now - job.pending_since
      << " s (launcher.slurm.pending_timeout_seconds = " << limit << "): " << state.detail;
  return Fail(job, why.str(), now);
}

void Coordinator::Run(std::vector<Action> actions) {
  for (Action& a : actions) {
    if (a.kind == Action::Kind::kKill) {
      Status s = a.launcher->Kill(a.handle);
      if (!s.ok()) FB_LOG(WARNING) << "job " << a.job_id << ": kill failed: " << s.ToString();
      continue;
    }
    StatusOr<std::string> handle = a.launcher->Launch(a.spec);
    std::vector<Action> more;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = jobs_.find(a.job_id);
      if (it == jobs_.end()) continue;
      Job& job = *it->second;
      const double now = clock_->NowSeconds();
      const bool current = job.attempt == a.attempt &&
                           (job.state == JobState::kLaunching || job.state == JobState::kRunning);
      if (!handle.ok()) {
        if (current) more = Fail(job, "launch failed: " + handle.status().message(), now);
      } else if (!current) {
        Action kill;
        kill.launcher = a.launcher;
        kill.job_id = a.job_id;
        kill.handle = *handle;
        more.push_back(std::move(kill));
      } else {
        job.launch_handle = *handle;
        Persist(job, now);
        FB_LOG(INFO) << "job " << job.id << ": launched attempt " << a.attempt << " ("
                     << a.launcher->name() << " " << *handle << ")";
      }
    }
    Run(std::move(more));
  }
}

}  // namespace fullband::coordinator

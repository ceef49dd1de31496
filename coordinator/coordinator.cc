#include "coordinator/coordinator.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

#include "common/logging.h"
#include "coordinator/coordinator_job.h"

namespace fullband::coordinator {

// Note [Acknowledge after durable]: the in-memory state runs ahead of the store by at most the
// writes in the group-commit queue. A response reveals that state (a step counted, a lease
// granted), so the adapter acknowledges only after everything appended so far is durable; a
// crash then loses only writes that no one was told about.

namespace {

constexpr double kThroughputWindow = 30;  // seconds of reports behind tokens_per_second

Status Stale(const std::string& job_id, uint64_t incarnation) {
  return Status(StatusCode::kAborted, "job " + job_id + ": incarnation " +
                                          std::to_string(incarnation) +
                                          " is not the registered worker group");
}

// A report's passes, tokens and losses against the step's assignment: INVALID_ARGUMENT naming
// the field that differs.
Status CheckReportOfLease(const StepReport& r, const StepAssignment& a) {
  if (r.passes != a.passes) {
    return InvalidArgumentError("passes: " + std::to_string(r.passes) + " but step " +
                                std::to_string(r.step) + " was leased with " +
                                std::to_string(a.passes));
  }
  if (r.tokens != a.tokens) {
    return InvalidArgumentError("tokens: " + std::to_string(r.tokens) + " but step " +
                                std::to_string(r.step) + " was leased with " +
                                std::to_string(a.tokens));
  }
  if (static_cast<int64_t>(r.losses.size()) != r.passes) {
    return InvalidArgumentError("losses: " + std::to_string(r.losses.size()) + " values for " +
                                std::to_string(r.passes) + " passes");
  }
  for (size_t i = 0; i < r.losses.size(); ++i) {
    if (!std::isfinite(r.losses[i])) {
      return InvalidArgumentError("losses[" + std::to_string(i) + "]: not finite");
    }
  }
  return OkStatus();
}

}  // namespace

std::string JobStateName(JobState state) {
  std::string name(NameOf(state));
  for (char& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return name;
}

bool IsTerminal(JobState s) {
  return s == JobState::kCompleted || s == JobState::kFailed || s == JobState::kCancelled;
}

Coordinator::Coordinator(CoordinatorOptions options, const Clock* clock,
                         std::map<LauncherKind, Launcher*> launchers, Store* store)
    : options_(std::move(options)),
      clock_(clock),
      launchers_(std::move(launchers)),
      store_(store),
      records_(store) {}

StatusOr<std::unique_ptr<Coordinator>> Coordinator::Create(
    CoordinatorOptions options, const Clock* clock, std::map<LauncherKind, Launcher*> launchers,
    Store* store) {
  std::unique_ptr<Coordinator> c(
      new Coordinator(std::move(options), clock, std::move(launchers), store));
  FB_RETURN_IF_ERROR(c->Load());
  return c;
}

Coordinator::~Coordinator() = default;

Status Coordinator::Load() {
  const double now = clock_->NowSeconds();
  FB_ASSIGN_OR_RETURN(std::vector<LoadedJob> loaded, records_.Load());
  for (LoadedJob& stored : loaded) {
    const std::string& id = stored.id;
    auto job = std::make_unique<Job>();
    static_cast<JobRecord&>(*job) = std::move(stored.record);
    job->id = id;
    job->spec = std::move(stored.submitted.spec);
    job->created_unix = stored.submitted.created_unix;
    job->counted = std::move(stored.counted);
    const Status valid = job->spec.config.Validate();
    if (!valid.ok()) return DataLossError("job " + id + ": " + valid.message());
    StatusOr<StepPlan> plan = StepPlan::Create(job->spec.config);
    if (!plan.ok()) return DataLossError("job " + id + ": " + plan.status().message());
    job->plan = std::move(*plan);
    const std::string& request_id = stored.submitted.request_id;
    if (!request_id.empty()) submitted_[{job->spec.owner, request_id}] = id;
    if (!job->worker_token_digest.empty() && !IsTerminal(job->state) &&
        options_.restore_worker_token) {
      options_.restore_worker_token(id, job->worker_token_digest);
    }
    job->last_heartbeat = now;
    job->launched_at = now;
    const int64_t number = std::atoll(id.c_str() + 4);
    next_id_ = std::max(next_id_, number + 1);
    jobs_[id] = std::move(job);
  }
  if (!jobs_.empty()) FB_LOG(INFO) << "coordinator: loaded " << jobs_.size() << " jobs";
  return OkStatus();
}

StatusOr<Coordinator::Job*> Coordinator::Find(const std::string& job_id) const {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return NotFoundError("no job " + job_id);
  return it->second.get();
}

Status Coordinator::CheckIncarnation(const Job& job, uint64_t incarnation) const {
  if (incarnation == 0 || incarnation != job.incarnation) return Stale(job.id, incarnation);
  return OkStatus();
}

void Coordinator::Persist(Job& job, double now, WriteSet extra) {
  job.updated_unix = now;
  ++job.version;
  JobStore::PutState(job.id, job, extra);
  store_->Append(std::move(extra));
}

JobInfo Coordinator::Info(const Job& job, double now) const {
  JobInfo info;
  static_cast<JobRecord&>(info) = job;
  info.id = job.id;
  info.spec = job.spec;
  if (job.wall_start_unix > 0 && !IsTerminal(job.state)) {
    info.ledger.wall_seconds = now - job.wall_start_unix;
  }
  info.total_steps = job.plan.total_steps();
  info.budget_amount = job.plan.amount();
  switch (job.plan.kind()) {
    case BudgetKind::kTokens:
      info.budget_spent = static_cast<double>(job.ledger.tokens);
      break;
    case BudgetKind::kTokenEquivalents:
      info.budget_spent = static_cast<double>(job.ledger.token_equivalents);
      break;
    case BudgetKind::kFlops:
      info.budget_spent = job.ledger.flops;
      break;
  }
  info.created_unix = job.created_unix;
  if (job.state == JobState::kRunning && job.recent.size() >= 2) {
    const double span = std::max(job.recent.back().first - job.recent.front().first,
                                 now - job.recent.front().first);
    int64_t tokens = 0;
    for (size_t i = 1; i < job.recent.size(); ++i) tokens += job.recent[i].second;
    if (span > 0) info.tokens_per_second = static_cast<double>(tokens) / span;
  }
  info.version = job.version;
  return info;
}

StatusOr<std::string> Coordinator::SubmitJob(JobSpec spec, const std::string& request_id) {
  FB_RETURN_IF_ERROR(spec.config.Validate());
  if (!launchers_.count(spec.config.launcher.kind)) {
    return InvalidArgumentError(
        "launcher.kind: " + std::string(LauncherKindName(spec.config.launcher.kind)) +
        " is not available on this coordinator");
  }
  FB_ASSIGN_OR_RETURN(StepPlan plan, StepPlan::Create(spec.config));
  const double now = clock_->NowSeconds();
  std::lock_guard<std::mutex> lock(mu_);
  if (!request_id.empty()) {
    auto seen = submitted_.find({spec.owner, request_id});
    if (seen != submitted_.end()) {  // a retry of a submit that reached us
      const JobSpec& first = jobs_.at(seen->second)->spec;
      if (first.name != spec.name || first.config != spec.config) {
        return AlreadyExistsError("request_id " + request_id + " was used for job " + seen->second +
                                  " with another spec");
      }
      return seen->second;
    }
  }
  char id[32];
  std::snprintf(id, sizeof(id), "job-%06lld", static_cast<long long>(next_id_++));
  auto job = std::make_unique<Job>();
  job->id = id;
  job->spec = std::move(spec);
  job->plan = std::move(plan);
  job->created_unix = now;
  if (!request_id.empty()) submitted_[{job->spec.owner, request_id}] = job->id;
  WriteSet writes;
  JobStore::PutSpec(job->id, {job->spec, now, request_id}, writes);
  Persist(*job, now, std::move(writes));
  FB_LOG(INFO) << "job " << job->id << " (" << job->spec.name << ", " << job->spec.owner
               << ") submitted: " << job->plan.total_steps() << " steps";
  jobs_[job->id] = std::move(job);
  return std::string(id);
}

StatusOr<JobInfo> Coordinator::GetJob(const std::string& job_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  FB_ASSIGN_OR_RETURN(Job * job, Find(job_id));
  return Info(*job, clock_->NowSeconds());
}

StatusOr<HistoryPage> Coordinator::History(const std::string& job_id, int64_t start_step,
                                           int64_t max_steps) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    FB_RETURN_IF_ERROR(Find(job_id).status());
  }
  return records_.History(job_id, start_step, max_steps);
}

std::vector<JobInfo> Coordinator::ListJobs(const std::string& owner, bool include_finished) const {
  std::lock_guard<std::mutex> lock(mu_);
  const double now = clock_->NowSeconds();
  std::vector<JobInfo> out;
  for (const auto& [id, job] : jobs_) {
    if (!owner.empty() && job->spec.owner != owner) continue;
    if (!include_finished && IsTerminal(job->state)) continue;
    out.push_back(Info(*job, now));
  }
  return out;
}

std::vector<Coordinator::Action> Coordinator::Finish(Job& job, JobState state,
                                                     const std::string& reason, double now) {
  std::vector<Action> actions;
  if (!job.launch_handle.empty()) {
    Action kill;
    kill.kind = Action::Kind::kKill;
    kill.job_id = job.id;
    kill.launcher = launchers_.at(job.spec.config.launcher.kind);
    kill.handle = job.launch_handle;
    actions.push_back(std::move(kill));
    job.launch_handle.clear();
  }
  job.state = state;
  job.reason = reason;
  if (job.wall_start_unix > 0) job.ledger.wall_seconds = now - job.wall_start_unix;
  // Note [Token after the end]: the group keeps its token for a heartbeat timeout, so that it
  // learns the terminal state from its next heartbeat (instead of UNAUTHENTICATED) and can
  // commit its final checkpoint; then the token is revoked (Tick).
  if (IsTerminal(state) && !job.worker_token_digest.empty()) {
    job.revoke_token_at = now + options_.heartbeat_timeout_seconds;
  }
  return actions;
}

StatusOr<JobInfo> Coordinator::CancelJob(const std::string& job_id, const std::string& reason) {
  std::vector<Action> actions;
  JobInfo info;
  {
    std::lock_guard<std::mutex> lock(mu_);
    FB_ASSIGN_OR_RETURN(Job * job, Find(job_id));
    const double now = clock_->NowSeconds();
    if (!IsTerminal(job->state)) {
      actions = Finish(*job, JobState::kCancelled, reason.empty() ? "cancelled" : reason, now);
      job->incarnation = 0;
      Persist(*job, now);
      FB_LOG(INFO) << "job " << job_id << " cancelled: " << job->reason;
    }
    info = Info(*job, now);
    Defer(std::move(actions));
  }
  return info;
}

StatusOr<Coordinator::Job*> Coordinator::RunningJob(const std::string& job_id,
                                                    uint64_t incarnation) {
  FB_ASSIGN_OR_RETURN(Job * job, Find(job_id));
  // The state first: a group of a finished or restarting job learns that, not that it is stale.
  if (job->state != JobState::kRunning) {
    return FailedPreconditionError("job " + job_id + " is " +
                                   std::string(JobStateName(job->state)));
  }
  FB_RETURN_IF_ERROR(CheckIncarnation(*job, incarnation));
  return job;
}

void Coordinator::Uncount(Job& job, int64_t step, int64_t passes, WriteSet& writes) {
  const int64_t tokens = job.plan.tokens_per_step();
  const double flops = job.plan.StepFlops(passes);
  Ledger& l = job.ledger;
  l.steps -= 1;
  l.tokens -= tokens;
  l.token_equivalents -= tokens * passes;
  l.flops -= flops;
  if (--l.pass_histogram[passes] == 0) l.pass_histogram.erase(passes);
  l.wasted_steps += 1;
  l.wasted_tokens += tokens;
  l.wasted_token_equivalents += tokens * passes;
  l.wasted_flops += flops;
  JobStore::DeleteStep(job.id, step, writes);
  if (l.steps == 0) l.flops = 0;  // no rounding residue
}

void Coordinator::Rollback(Job& job, WriteSet& writes) {
  // Back to the last committed checkpoint: the steps counted after it are redone.
  for (const auto& [step, passes] : job.counted) Uncount(job, step, passes, writes);
  job.counted.clear();
  job.recent.clear();
  job.incarnation = 0;
}

std::vector<Coordinator::Action> Coordinator::Fail(Job& job, const std::string& reason,
                                                   double now) {
  if (IsTerminal(job.state)) return {};
  WriteSet writes;
  Rollback(job, writes);
  std::vector<Action> actions;
  const int64_t max_restarts = job.spec.config.launcher.max_restarts;
  if (job.restarts < max_restarts) {
    const LauncherConfig& l = job.spec.config.launcher;
    const double backoff =
        std::min(l.max_backoff_seconds, l.backoff_seconds * std::pow(2.0, job.restarts));
    actions = Finish(job, JobState::kRestarting, reason, now);
    job.restarts += 1;
    job.restart_at_unix = now + backoff;
    FB_LOG(WARNING) << "job " << job.id << " restarting (" << job.restarts << "/" << max_restarts
                    << ") from step " << job.committed_step << " in " << backoff
                    << " s: " << reason;
  } else {
    actions = Finish(job, JobState::kFailed,
                     "failed after " + std::to_string(job.restarts) + " restarts: " + reason, now);
    FB_LOG(ERROR) << "job " << job.id << " " << job.reason;
  }
  Persist(job, now, std::move(writes));
  return actions;
}

StatusOr<Registration> Coordinator::RegisterWorkerGroup(const std::string& job_id,
                                                        uint64_t incarnation, int64_t attempt,
                                                        int64_t world_size) {
  if (incarnation == 0) return InvalidArgumentError("incarnation: must be non-zero");
  Registration reg;
  {
    std::lock_guard<std::mutex> lock(mu_);
    FB_ASSIGN_OR_RETURN(Job * job, Find(job_id));
    const Config& config = job->spec.config;
    const int64_t world = config.parallel.tp * config.parallel.dp;
    if (world_size != world) {
      return InvalidArgumentError("world_size: " + std::to_string(world_size) +
                                  " is not parallel.tp × parallel.dp = " + std::to_string(world));
    }
    if (job->state != JobState::kLaunching && job->state != JobState::kRunning) {
      return FailedPreconditionError("job " + job_id + " is " +
                                     std::string(JobStateName(job->state)) +
                                     ", not accepting worker groups");
    }
    if (attempt != job->attempt) {
      return FailedPreconditionError("job " + job_id + ": attempt " + std::to_string(attempt) +
                                     " is not the current attempt " + std::to_string(job->attempt));
    }
    const double now = clock_->NowSeconds();
    if (job->incarnation != incarnation) {
      WriteSet writes;
      if (job->state == JobState::kRunning) {
        // A new group of the same attempt replaced the registered one (it restarted on its
        // own): what the old one counted after the checkpoint is redone by the new one.
        Rollback(*job, writes);
      }
      job->state = JobState::kRunning;
      job->incarnation = incarnation;
      job->reason.clear();
      job->last_heartbeat = now;
      Persist(*job, now, std::move(writes));
      FB_LOG(INFO) << "job " << job_id << ": worker group " << incarnation
                   << " registered (attempt " << attempt << "), resuming at step "
                   << job->committed_step;
    }
    reg.config = config;
    reg.resume_step = job->committed_step;
    reg.checkpoint_path = job->checkpoint_path;
    reg.total_steps = job->plan.total_steps();
  }
  return reg;
}

StatusOr<JobState> Coordinator::Heartbeat(const std::string& job_id, uint64_t incarnation) {
  std::lock_guard<std::mutex> lock(mu_);
  FB_ASSIGN_OR_RETURN(Job * job, Find(job_id));
  if (IsTerminal(job->state) || job->state == JobState::kRestarting) return job->state;
  FB_RETURN_IF_ERROR(CheckIncarnation(*job, incarnation));
  job->last_heartbeat = clock_->NowSeconds();
  return job->state;
}

StatusOr<LeaseResult> Coordinator::LeaseBatches(const std::string& job_id, uint64_t incarnation,
                                                int64_t from_step, int64_t count) {
  if (from_step < 0)
    return InvalidArgumentError("from_step: " + std::to_string(from_step) + " < 0");
  if (count < 1 || count > options_.max_lease) {
    return InvalidArgumentError("count: " + std::to_string(count) + " outside 1.." +
                                std::to_string(options_.max_lease));
  }
  std::lock_guard<std::mutex> lock(mu_);
  FB_ASSIGN_OR_RETURN(Job * job, RunningJob(job_id, incarnation));
  const double now = clock_->NowSeconds();
  job->last_heartbeat = now;
  LeaseResult result;
  const int64_t total = job->plan.total_steps();
  if (from_step >= total) {  // nothing fits the budget: nothing is leased
    result.budget_exhausted = true;
    return result;
  }
  // Leases continue from the mark, so steps [0, leased_until) are exactly those handed out.
  if (from_step > job->leased_until) {
    return FailedPreconditionError("job " + job_id + ": leases continue from step " +
                                   std::to_string(job->leased_until) + ", not " +
                                   std::to_string(from_step));
  }
  const int64_t end = std::min(total, from_step + count);  // from_step < total: no overflow
  for (int64_t step = from_step; step < end; ++step) result.steps.push_back(job->plan.Assign(step));
  result.budget_exhausted = end >= total;
  if (end > job->leased_until) {
    job->leased_until = end;
    Persist(*job, now);
  }
  return result;
}

StatusOr<ReportResult> Coordinator::ReportStep(const StepReport& r) {
  if (r.step < 0) return InvalidArgumentError("step: " + std::to_string(r.step) + " < 0");
  if (!(r.step_seconds >= 0) || !std::isfinite(r.step_seconds)) {
    return InvalidArgumentError("step_seconds: must be a finite number >= 0");
  }
  std::lock_guard<std::mutex> lock(mu_);
  FB_ASSIGN_OR_RETURN(Job * job, Find(r.job_id));
  FB_RETURN_IF_ERROR(CheckIncarnation(*job, r.incarnation));
  ReportResult result;
  if (r.step >= job->leased_until || r.step >= job->plan.total_steps()) {
    return FailedPreconditionError("job " + r.job_id + ": step " + std::to_string(r.step) +
                                   " was never leased");
  }
  const StepAssignment a = job->plan.Assign(r.step);
  FB_RETURN_IF_ERROR(CheckReportOfLease(r, a));
  if (r.step < job->committed_step || job->counted.count(r.step)) {
    result.duplicate = true;
    result.job_completed = job->state == JobState::kCompleted;
    return result;
  }
  if (job->state != JobState::kRunning) {
    return FailedPreconditionError("job " + r.job_id + " is " +
                                   std::string(JobStateName(job->state)));
  }
  const double now = clock_->NowSeconds();
  job->last_heartbeat = now;
  job->counted[r.step] = a.passes;
  Ledger& l = job->ledger;
  l.steps += 1;
  l.tokens += a.tokens;
  l.token_equivalents += a.tokens * a.passes;
  l.flops += job->plan.StepFlops(a.passes);
  l.pass_histogram[a.passes] += 1;
  l.step_seconds += r.step_seconds;
  l.last_losses = r.losses;
  job->recent.emplace_back(now, a.tokens);
  while (job->recent.size() > 2 && job->recent.front().first < now - kThroughputWindow) {
    job->recent.pop_front();
  }
  WriteSet writes;
  JobStore::PutStep(
      job->id, r.step,
      {a.passes, a.tokens, r.losses, r.step_seconds, r.incarnation, now, job->attempt}, writes);
  if (job->committed_step + static_cast<int64_t>(job->counted.size()) == job->plan.total_steps()) {
    // Every step of the budget is counted. The group may still commit its last checkpoint.
    job->state = JobState::kCompleted;
    job->reason = "budget spent";
    if (job->wall_start_unix > 0) l.wall_seconds = now - job->wall_start_unix;
    result.job_completed = true;
    FB_LOG(INFO) << "job " << job->id << " completed: " << l.steps << " steps, " << l.tokens
                 << " tokens";
  }
  Persist(*job, now, std::move(writes));
  return result;
}

Status Coordinator::CommitCheckpoint(const std::string& job_id, uint64_t incarnation, int64_t step,
                                     const std::string& path, int64_t shards) {
  if (step < 1) return InvalidArgumentError("step: " + std::to_string(step) + " < 1");
  if (path.empty()) return InvalidArgumentError("path: empty");
  if (shards < 1) return InvalidArgumentError("shards: " + std::to_string(shards) + " < 1");
  std::lock_guard<std::mutex> lock(mu_);
  FB_ASSIGN_OR_RETURN(Job * job, Find(job_id));
  FB_RETURN_IF_ERROR(CheckIncarnation(*job, incarnation));
  if (job->state != JobState::kRunning && job->state != JobState::kCompleted) {
    return FailedPreconditionError("job " + job_id + " is " +
                                   std::string(JobStateName(job->state)));
  }
  if (step <= job->committed_step) return OkStatus();  // an older or repeated commit
  // Every step before `step` must be counted.
  const int64_t counted_before =
      static_cast<int64_t>(std::distance(job->counted.begin(), job->counted.lower_bound(step)));
  if (job->committed_step + counted_before != step) {
    return FailedPreconditionError("job " + job_id + ": checkpoint at step " +
                                   std::to_string(step) + " but only " +
                                   std::to_string(job->committed_step + counted_before) +
                                   " of the steps before it are counted");
  }
  const double now = clock_->NowSeconds();
  job->counted.erase(job->counted.begin(), job->counted.lower_bound(step));
  job->committed_step = step;
  job->checkpoint_path = path;
  job->last_heartbeat = now;
  WriteSet writes;
  JobStore::PutCheckpoint(job_id, step, {path, shards, incarnation, now}, writes);
  Persist(*job, now, std::move(writes));
  return OkStatus();
}

Status Coordinator::RollBackCheckpoint(const std::string& job_id, uint64_t incarnation,
                                       int64_t step, const std::string& path,
                                       const std::string& reason) {
  if (step < 0) return InvalidArgumentError("step: " + std::to_string(step) + " < 0");
  if ((step == 0) != path.empty()) {
    return InvalidArgumentError("path: must be empty exactly when step is 0");
  }
  std::lock_guard<std::mutex> lock(mu_);
  FB_ASSIGN_OR_RETURN(Job * job, RunningJob(job_id, incarnation));
  if (step >= job->committed_step) {
    return FailedPreconditionError("job " + job_id + ": step " + std::to_string(step) +
                                   " is not before the committed checkpoint's, " +
                                   std::to_string(job->committed_step));
  }
  WriteSet writes;
  for (const auto& [s, passes] : job->counted) Uncount(*job, s, passes, writes);
  job->counted.clear();
  for (int64_t s = step; s < job->committed_step; ++s)
    Uncount(*job, s, job->plan.Passes(s), writes);
  // Forget the newer checkpoints; remember the one the group restarted from.
  FB_RETURN_IF_ERROR(records_.DeleteCheckpointsAfter(job_id, step, writes));
  const double now = clock_->NowSeconds();
  if (step > 0) {  // shards 0: not known to the rollback; the directory's manifest says
    JobStore::PutCheckpoint(job_id, step, {path, 0, incarnation, now}, writes);
  }
  FB_LOG(WARNING) << "job " << job_id << ": checkpoint of step " << job->committed_step
                  << " unusable, the worker group restarted from step " << step << ": " << reason;
  job->committed_step = step;
  job->checkpoint_path = path;
  job->last_heartbeat = now;
  Persist(*job, now, std::move(writes));
  return OkStatus();
}

Status Coordinator::ReportFailure(const std::string& job_id, uint64_t incarnation,
                                  const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    FB_ASSIGN_OR_RETURN(Job * job, Find(job_id));
    FB_RETURN_IF_ERROR(CheckIncarnation(*job, incarnation));
    Defer(Fail(*job, "worker reported: " + reason, clock_->NowSeconds()));
  }
  return OkStatus();
}

void Coordinator::set_advertise_address(const std::string& address) {
  std::lock_guard<std::mutex> lock(mu_);
  options_.advertise_address = address;
}

}  // namespace fullband::coordinator

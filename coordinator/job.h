// The plain C++ types of a coordinator job: its state and their names, its ledger, its spec, the
// record the store keeps of it (JobRecord) and the copy users see (JobInfo). Each lists its
// fields once, with VisitFields (common/visit_fields.h), under the names of the proto message it
// travels as: proto/reflect_fields.h converts them (coordinator/job_store.cc for the store's
// records, coordinator/proto_convert.cc for the wire). No proto types here.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/config.h"
#include "common/config_fields.h"
#include "common/visit_fields.h"

namespace fullband::coordinator {

enum class JobState {
  kPending,
  kLaunching,
  kRunning,
  kRestarting,
  kCompleted,
  kFailed,
  kCancelled
};
// The one list of the states' names; proto::JobState spells each JOB_STATE_<NAME>.
inline constexpr NameTable<JobState, 7> kJobStateNames{{{JobState::kPending, "pending"},
                                                        {JobState::kLaunching, "launching"},
                                                        {JobState::kRunning, "running"},
                                                        {JobState::kRestarting, "restarting"},
                                                        {JobState::kCompleted, "completed"},
                                                        {JobState::kFailed, "failed"},
                                                        {JobState::kCancelled, "cancelled"}}};
constexpr const auto& EnumNames(JobState) { return kJobStateNames; }
std::string JobStateName(JobState state);  // "PENDING", ... (as errors and metrics spell it)
bool IsTerminal(JobState state);

// Compute accounting of one job (docs/DESIGN.md §1). Counted totals cover the steps counted since
// the last rollback; wasted totals the steps a restart rolled back.
struct Ledger {
  int64_t steps = 0;
  int64_t tokens = 0;
  int64_t token_equivalents = 0;
  double flops = 0;
  std::map<int64_t, int64_t> pass_histogram;  // passes -> counted steps
  double wall_seconds = 0;                    // from the first launch to a terminal state (or now)
  double step_seconds = 0;                    // Σ reported step times
  int64_t wasted_steps = 0;
  int64_t wasted_tokens = 0;
  int64_t wasted_token_equivalents = 0;
  double wasted_flops = 0;
  std::vector<double> last_losses;  // per pass, of the last counted step
  bool operator==(const Ledger&) const = default;
};

// Its fields, as proto::Ledger names them.
template <FieldsOf<Ledger> M, typename Visitor>
void VisitFields(M& l, Visitor&& visit) {
  visit("steps", l.steps);
  visit("tokens", l.tokens);
  visit("token_equivalents", l.token_equivalents);
  visit("flops", l.flops);
  visit("pass_histogram", l.pass_histogram);
  visit("wall_seconds", l.wall_seconds);
  visit("step_seconds", l.step_seconds);
  visit("wasted_steps", l.wasted_steps);
  visit("wasted_tokens", l.wasted_tokens);
  visit("wasted_token_equivalents", l.wasted_token_equivalents);
  visit("wasted_flops", l.wasted_flops);
  visit("last_losses", l.last_losses);
}

struct JobSpec {
  std::string name;
  std::string owner;
  Config config;
};

// As proto::JobSpec names them.
template <FieldsOf<JobSpec> M, typename Visitor>
void VisitFields(M& s, Visitor&& visit) {
  visit("name", s.name);
  visit("owner", s.owner);
  visit("config", s.config);
}

// What the store keeps of a job's progress, rewritten on every change (proto::StoredJobState,
// key job/<id>/state of coordinator/FORMAT.md). The coordinator's job and JobInfo extend it.
struct JobRecord {
  JobState state = JobState::kPending;
  std::string reason;
  int64_t attempt = 0;
  int64_t restarts = 0;
  uint64_t incarnation = 0;  // of the registered worker group (0 = none)
  std::string launch_handle;
  int64_t leased_until = 0;  // steps [0, leased_until) have been leased
  int64_t committed_step = 0;
  std::string checkpoint_path;
  Ledger ledger;
  double restart_at_unix = 0;  // RESTARTING: when to relaunch
  double updated_unix = 0;
  double wall_start_unix = 0;       // start of the accounted wall time (0 = not launched yet)
  std::string worker_token_digest;  // of the current attempt's worker token ("" = none)
};

// As proto::StoredJobState names them.
template <FieldsOf<JobRecord> M, typename Visitor>
void VisitFields(M& r, Visitor&& visit) {
  visit("state", r.state);
  visit("reason", r.reason);
  visit("attempt", r.attempt);
  visit("restarts", r.restarts);
  visit("incarnation", r.incarnation);
  visit("launch_handle", r.launch_handle);
  visit("leased_until", r.leased_until);
  visit("committed_step", r.committed_step);
  visit("checkpoint_path", r.checkpoint_path);
  visit("ledger", r.ledger);
  visit("restart_at_unix", r.restart_at_unix);
  visit("updated_unix", r.updated_unix);
  visit("wall_start_unix", r.wall_start_unix);
  visit("worker_token_digest", r.worker_token_digest);
}

// A consistent copy of one job: its record (the ledger's wall time up to now) and what the
// coordinator derives from its plan and its recent reports.
struct JobInfo : JobRecord {
  std::string id;
  JobSpec spec;
  int64_t total_steps = 0;
  double budget_amount = 0;
  double budget_spent = 0;
  double created_unix = 0;
  double tokens_per_second = 0;
  uint64_t version = 0;  // increases on every change (WatchJob); not on the wire
};

// The fields proto::Job has, as it names them.
template <FieldsOf<JobInfo> M, typename Visitor>
void VisitFields(M& j, Visitor&& visit) {
  visit("id", j.id);
  visit("spec", j.spec);
  visit("state", j.state);
  visit("reason", j.reason);
  visit("attempt", j.attempt);
  visit("restarts", j.restarts);
  visit("ledger", j.ledger);
  visit("total_steps", j.total_steps);
  visit("budget_amount", j.budget_amount);
  visit("budget_spent", j.budget_spent);
  visit("committed_step", j.committed_step);
  visit("checkpoint_path", j.checkpoint_path);
  visit("leased_until", j.leased_until);
  visit("created_unix", j.created_unix);
  visit("updated_unix", j.updated_unix);
  visit("tokens_per_second", j.tokens_per_second);
}

// One counted step, as the store keeps it (proto::StoredStep, key step/<id>/<step>).
struct StepRecord {
  int64_t passes = 0;
  int64_t tokens = 0;
  std::vector<double> losses;  // per pass
  double step_seconds = 0;
  uint64_t incarnation = 0;
  double unix_time = 0;  // when it was counted
  int64_t attempt = 0;   // the job's attempt that reported it
};

template <FieldsOf<StepRecord> M, typename Visitor>
void VisitFields(M& s, Visitor&& visit) {
  visit("passes", s.passes);
  visit("tokens", s.tokens);
  visit("losses", s.losses);
  visit("step_seconds", s.step_seconds);
  visit("incarnation", s.incarnation);
  visit("unix_time", s.unix_time);
  visit("attempt", s.attempt);
}

// A page of a job's counted steps (GetJobHistory in proto/coordinator.proto).
struct HistoryPage {
  std::vector<std::pair<int64_t, StepRecord>> steps;  // (step, its record), in step order
  int64_t next_start_step = -1;                       // where the next page starts; -1: none
};

}  // namespace fullband::coordinator

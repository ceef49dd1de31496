// The Coordinator's private types, shared by its two files: coordinator.cc (the job state
// machine and the RPCs) and launch_loop.cc (Tick: launches, polls and deadlines). Not an
// interface: nothing else includes this.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <utility>

#include "common/step_plan.h"
#include "coordinator/coordinator.h"

namespace fullband::coordinator {

// A job: its stored record (JobRecord, coordinator/job.h) and what lives in memory only.
struct Coordinator::Job : JobRecord {
  std::string id;
  JobSpec spec;
  double created_unix = 0;
  StepPlan plan;
  std::string worker_token;            // in memory only: for the launch of the current attempt
  double revoke_token_at = 0;          // a finished job's token is revoked then (0: not finished)
  std::map<int64_t, int64_t> counted;  // counted steps >= committed_step -> passes
  // Not stored: deadlines restart from the coordinator's start.
  double last_heartbeat = 0;
  double launched_at = 0;    // the launch deadline counts from here
  double pending_since = 0;  // when the launcher first said the attempt waits in a queue
  bool queued = false;       // the launcher's last word: it waits in a queue
  uint64_t version = 0;
  std::deque<std::pair<double, int64_t>> recent;  // (time, tokens) of recent reports
};

// A launcher call to make outside the mutex.
struct Coordinator::Action {
  enum class Kind { kLaunch, kKill } kind = Kind::kKill;
  std::string job_id;
  int64_t attempt = 0;
  Launcher* launcher = nullptr;
  std::string handle;  // kKill
  LaunchSpec spec;     // kLaunch
};

// A worker group whose launcher Tick asks how it is (outside the mutex).
struct Coordinator::Poll {
  std::string job_id;
  int64_t attempt = 0;
  Launcher* launcher = nullptr;
  std::string handle;
};

}  // namespace fullband::coordinator

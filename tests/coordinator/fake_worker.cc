// fake_worker: a test double of the training worker, built on coordinator/client.h. It
// registers with the coordinator named by FULLBAND_COORDINATOR for FULLBAND_JOB_ID /
// FULLBAND_ATTEMPT, leases steps, pretends to train (sleeps --step-ms), reports made-up losses,
// writes an empty checkpoint directory every --checkpoint-every steps and commits it, and exits
// 0 when the budget is spent. Faults for tests: --fail-at-step S reports a failure at step S,
// --crash-at-step S exits with code 4 without a word; both only in attempts below
// --faulty-attempts (default 1), so the relaunch finishes the job. Under mpirun, ranks other
// than 0 exit at once.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include "coordinator/client.h"

namespace {

using fullband::coordinator::WorkerClient;

int64_t EnvInt(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoll(v) : fallback;
}

// What the launcher sets for the worker (coordinator/local_launcher.h, Note [Worker
// environment]), as `fullband worker` reads it.
fullband::coordinator::ClientOptions ClientOptionsFromEnvironment() {
  fullband::coordinator::ClientOptions o;
  if (const char* v = std::getenv("FULLBAND_COORDINATOR")) o.address = v;
  if (const char* v = std::getenv("FULLBAND_WORKER_TOKEN")) o.token = v;
  if (const char* v = std::getenv("FULLBAND_TLS_CA")) o.tls_ca_file = v;
  return o;
}

// The flags, as in the header above.
struct Flags {
  int64_t step_ms = 1, fail_at = -1, crash_at = -1, every = 0, faulty_attempts = 1;
  std::string ckpt_dir = "checkpoints";
};

// False, with a line on stderr, for a flag it does not know.
bool ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const char* v = argv[i + 1];
    if (flag == "--step-ms") {
      f->step_ms = std::atoll(v);
    } else if (flag == "--fail-at-step") {
      f->fail_at = std::atoll(v);
    } else if (flag == "--crash-at-step") {
      f->crash_at = std::atoll(v);
    } else if (flag == "--checkpoint-every") {
      f->every = std::atoll(v);
    } else if (flag == "--faulty-attempts") {
      f->faulty_attempts = std::atoll(v);
    } else if (flag == "--ckpt-dir") {
      f->ckpt_dir = v;
    } else {
      std::fprintf(stderr, "fake_worker: unknown flag %s\n", flag.c_str());
      return false;
    }
  }
  return true;
}

// One registered attempt of the worker group: leases, reports and commits until the budget is
// spent or the coordinator says stop.
class FakeTraining {
 public:
  FakeTraining(const Flags& flags, const char* job, bool faulty, WorkerClient& w)
      : flags_(flags), job_(job), faulty_(faulty), w_(w) {
    every_ = flags.every != 0 ? flags.every : w.registration().config().checkpoint().every_steps();
    committed_ = done_ = w.registration().resume_step();
  }

  // The process's exit code: 0 when the job's budget is spent and the last step committed.
  int Run() {
    while (!w_.should_stop()) {
      auto next = w_.NextStep();
      if (!next.ok()) {
        std::fprintf(stderr, "fake_worker: lease: %s\n", next.status().ToString().c_str());
        return 1;
      }
      if (!next->has_value()) break;
      bool completed = false;
      if (const std::optional<int> exit = Step(**next, &completed)) return *exit;
      if (completed) break;
    }
    if (w_.should_stop() && w_.stop_reason().find("COMPLETED") == std::string::npos) {
      std::fprintf(stderr, "fake_worker: told to stop: %s\n", w_.stop_reason().c_str());
      return 5;
    }
    if (done_ > committed_ && !Commit(done_)) return 1;
    std::printf("fake_worker: done at step %lld\n", static_cast<long long>(done_));
    return 0;
  }

 private:
  // Pretends to train step `a` and reports it, with the faults the flags ask for; commits
  // every `every_` steps. The exit code when the process is to end now.
  std::optional<int> Step(const fullband::proto::StepAssignment& a, bool* completed) {
    std::this_thread::sleep_for(std::chrono::milliseconds(flags_.step_ms));
    if (faulty_ && a.step() == flags_.crash_at) _exit(4);
    if (faulty_ && a.step() == flags_.fail_at) {
      const fullband::Status s = w_.Fail("injected failure at step " + std::to_string(a.step()));
      return s.ok() ? 3 : 1;
    }
    std::vector<double> losses;
    for (int64_t k = 0; k < a.passes(); ++k) losses.push_back(10.0 / (1.0 + a.step()) + 0.1 * k);
    auto report = w_.Report(a, losses, flags_.step_ms / 1000.0);
    if (!report.ok()) {
      std::fprintf(stderr, "fake_worker: report: %s\n", report.status().ToString().c_str());
      return 1;
    }
    done_ = a.step() + 1;
    if (every_ > 0 && done_ % every_ == 0) Commit(done_);
    *completed = report->job_completed();
    return std::nullopt;
  }

  // Writes an empty checkpoint of `step` (a manifest only) and commits it.
  bool Commit(int64_t step) {
    const std::string path = flags_.ckpt_dir + "/" + job_ + "/step-" + std::to_string(step);
    std::filesystem::create_directories(path);
    std::ofstream(path + "/manifest.json") << "{\"step\": " << step << "}\n";
    const fullband::Status s = w_.Commit(step, path, 1);
    if (!s.ok()) std::fprintf(stderr, "fake_worker: commit: %s\n", s.ToString().c_str());
    committed_ = step;
    return s.ok();
  }

  const Flags& flags_;
  const std::string job_;
  const bool faulty_;
  WorkerClient& w_;
  int64_t every_ = 0, committed_ = 0, done_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  if (!ParseFlags(argc, argv, &flags)) return 2;
  // Under mpirun only rank 0 talks to the coordinator (docs/DESIGN.md §2); the other ranks of this
  // double have nothing to do.
  if (EnvInt("OMPI_COMM_WORLD_RANK", 0) != 0) return 0;
  const char* job = std::getenv("FULLBAND_JOB_ID");
  if (job == nullptr) {
    std::fprintf(stderr, "fake_worker: FULLBAND_JOB_ID is not set\n");
    return 2;
  }
  const int64_t attempt = EnvInt("FULLBAND_ATTEMPT", 0);
  const int64_t world = EnvInt("OMPI_COMM_WORLD_SIZE", 1);
  auto worker = WorkerClient::Register(ClientOptionsFromEnvironment(), job, attempt, world);
  if (!worker.ok()) {
    std::fprintf(stderr, "fake_worker: register: %s\n", worker.status().ToString().c_str());
    return 1;
  }
  WorkerClient& w = **worker;
  std::printf("fake_worker: job %s attempt %lld resumes at step %lld of %lld\n", job,
              static_cast<long long>(attempt),
              static_cast<long long>(w.registration().resume_step()),
              static_cast<long long>(w.registration().total_steps()));
  std::fflush(stdout);
  return FakeTraining(flags, job, attempt < flags.faulty_attempts, w).Run();
}

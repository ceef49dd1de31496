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
#include <string>
#include <thread>

#include "coordinator/client.h"

namespace {

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

}  // namespace

int main(int argc, char** argv) {
  using fullband::coordinator::WorkerClient;
  int64_t step_ms = 1, fail_at = -1, crash_at = -1, every = 0, faulty_attempts = 1;
  std::string ckpt_dir = "checkpoints";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const char* v = argv[i + 1];
    if (flag == "--step-ms") {
      step_ms = std::atoll(v);
    } else if (flag == "--fail-at-step") {
      fail_at = std::atoll(v);
    } else if (flag == "--crash-at-step") {
      crash_at = std::atoll(v);
    } else if (flag == "--checkpoint-every") {
      every = std::atoll(v);
    } else if (flag == "--faulty-attempts") {
      faulty_attempts = std::atoll(v);
    } else if (flag == "--ckpt-dir") {
      ckpt_dir = v;
    } else {
      std::fprintf(stderr, "fake_worker: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  // Under mpirun only rank 0 talks to the coordinator (docs/DESIGN.md §2); the other ranks of this
  // double have nothing to do.
  if (EnvInt("OMPI_COMM_WORLD_RANK", 0) != 0) return 0;
  const char* job = std::getenv("FULLBAND_JOB_ID");
  if (job == nullptr) {
    std::fprintf(stderr, "fake_worker: FULLBAND_JOB_ID is not set\n");
    return 2;
  }
  const int64_t attempt = EnvInt("FULLBAND_ATTEMPT", 0);
  const bool faulty = attempt < faulty_attempts;
  const int64_t world = EnvInt("OMPI_COMM_WORLD_SIZE", 1);
  auto worker = WorkerClient::Register(ClientOptionsFromEnvironment(), job, attempt, world);
  if (!worker.ok()) {
    std::fprintf(stderr, "fake_worker: register: %s\n", worker.status().ToString().c_str());
    return 1;
  }
  WorkerClient& w = **worker;
  if (every == 0) every = w.registration().config().checkpoint().every_steps();
  std::printf("fake_worker: job %s attempt %lld resumes at step %lld of %lld\n", job,
              static_cast<long long>(attempt),
              static_cast<long long>(w.registration().resume_step()),
              static_cast<long long>(w.registration().total_steps()));
  std::fflush(stdout);
  int64_t committed = w.registration().resume_step();
  int64_t done = committed;
  const auto commit = [&](int64_t step) -> bool {
    const std::string path = ckpt_dir + "/" + job + "/step-" + std::to_string(step);
    std::filesystem::create_directories(path);
    std::ofstream(path + "/manifest.json") << "{\"step\": " << step << "}\n";
    const fullband::Status s = w.Commit(step, path, 1);
    if (!s.ok()) std::fprintf(stderr, "fake_worker: commit: %s\n", s.ToString().c_str());
    committed = step;
    return s.ok();
  };
  while (!w.should_stop()) {
    auto next = w.NextStep();
    if (!next.ok()) {
      std::fprintf(stderr, "fake_worker: lease: %s\n", next.status().ToString().c_str());
      return 1;
    }
    if (!next->has_value()) break;
    const auto& a = **next;
    std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
    if (faulty && a.step() == crash_at) _exit(4);
    if (faulty && a.step() == fail_at) {
      const fullband::Status s = w.Fail("injected failure at step " + std::to_string(a.step()));
      return s.ok() ? 3 : 1;
    }
    std::vector<double> losses;
    for (int64_t k = 0; k < a.passes(); ++k) losses.push_back(10.0 / (1.0 + a.step()) + 0.1 * k);
    auto report = w.Report(a, losses, step_ms / 1000.0);
    if (!report.ok()) {
      std::fprintf(stderr, "fake_worker: report: %s\n", report.status().ToString().c_str());
      return 1;
    }
    done = a.step() + 1;
    if (every > 0 && done % every == 0) commit(done);
    if (report->job_completed()) break;
  }
  if (w.should_stop() && w.stop_reason().find("COMPLETED") == std::string::npos) {
    std::fprintf(stderr, "fake_worker: told to stop: %s\n", w.stop_reason().c_str());
    return 5;
  }
  if (done > committed && !commit(done)) return 1;
  std::printf("fake_worker: done at step %lld\n", static_cast<long long>(done));
  return 0;
}

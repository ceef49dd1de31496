// serve_coordinator: the coordinator service in a process of its own for the crash test (the
// same CoordinatorService that `fullband coordinator` runs, without the rest of the CLI).
// Usage: serve_coordinator coordinator.yaml — prints "port N" once serving, runs until killed.
#include <signal.h>
#include <unistd.h>

#include <cstdio>

#include "coordinator/service.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: serve_coordinator coordinator.yaml\n");
    return 2;
  }
  auto config = fullband::coordinator::LoadServiceConfig(argv[1]);
  if (!config.ok()) {
    std::fprintf(stderr, "serve_coordinator: %s\n", config.status().ToString().c_str());
    return 2;
  }
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  auto service = fullband::coordinator::CoordinatorService::Start(*config);
  if (!service.ok()) {
    std::fprintf(stderr, "serve_coordinator: %s\n", service.status().ToString().c_str());
    return 1;
  }
  std::printf("port %d\n", (*service)->port());
  std::fflush(stdout);
  int signal = 0;
  sigwait(&signals, &signal);
  (*service)->Stop();
  return 0;
}

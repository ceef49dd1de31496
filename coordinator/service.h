// CoordinatorService: one running coordinator — the store, the job logic, the local
// launcher, authentication, the gRPC server, the /metrics server and the thread that calls
// Coordinator::Tick — built from `coordinator.yaml` (ServiceConfig). `fullband coordinator`
// runs one; tests start one on loopback.
//
// The keys of coordinator.yaml and their defaults: docs/COORDINATOR.md ("Running the coordinator"),
// checked against ServiceConfig by tests/coordinator/grpc_server_test.cc.
//
// Errors are those of the parts' Start/Open, with the part named.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/status.h"
#include "common/visit_fields.h"
#include "coordinator/auth.h"
#include "coordinator/clock.h"
#include "coordinator/coordinator.h"
#include "coordinator/grpc_server.h"
#include "coordinator/launcher.h"
#include "coordinator/local_launcher.h"
#include "coordinator/metrics_http.h"
#include "coordinator/rpc_handler.h"
#include "coordinator/slurm_launcher.h"
#include "coordinator/store.h"

namespace fullband::coordinator {

struct ServiceConfig {
  std::string listen = "127.0.0.1:7070";
  std::string advertise;
  std::string store_dir = "fullband-coordinator";
  std::string jobs_dir = "fullband-jobs";
  std::string tls_cert;
  std::string tls_key;
  std::string worker_tls_ca;            // FULLBAND_TLS_CA of every worker
  std::vector<std::string> worker_env;  // Note [Worker environment] (launcher.h)
  std::string tokens_file;
  std::string metrics_listen;
  double heartbeat_interval_seconds = 10;
  double heartbeat_timeout_seconds = 60;
  double launch_timeout_seconds = 600;
  double tick_seconds = 0.5;  // a missed deadline is acted on within one tick
  std::string mpirun = "mpirun";
  std::vector<std::string> mpirun_args;  // before -np, e.g. a hostfile
  bool direct_single_process = false;
  double kill_grace_seconds = 10;
  std::string slurm_bin_dir;      // sbatch, squeue, scancel, sacct, scontrol; "" = PATH
  double slurm_poll_seconds = 5;  // squeue at most this often, for every job at once

  bool operator==(const ServiceConfig&) const = default;
};

// The keys of coordinator.yaml, in file order (common/visit_fields.h).
template <FieldsOf<ServiceConfig> M, typename Visitor>
void VisitFields(M& c, Visitor&& visit) {
  visit("listen", c.listen);
  visit("advertise", c.advertise);
  visit("store_dir", c.store_dir);
  visit("jobs_dir", c.jobs_dir);
  visit("tls_cert", c.tls_cert);
  visit("tls_key", c.tls_key);
  visit("worker_tls_ca", c.worker_tls_ca);
  visit("worker_env", c.worker_env);
  visit("tokens_file", c.tokens_file);
  visit("metrics_listen", c.metrics_listen);
  visit("heartbeat_interval_seconds", c.heartbeat_interval_seconds);
  visit("heartbeat_timeout_seconds", c.heartbeat_timeout_seconds);
  visit("launch_timeout_seconds", c.launch_timeout_seconds);
  visit("tick_seconds", c.tick_seconds);
  visit("mpirun", c.mpirun);
  visit("mpirun_args", c.mpirun_args);
  visit("direct_single_process", c.direct_single_process);
  visit("kill_grace_seconds", c.kill_grace_seconds);
  visit("slurm_bin_dir", c.slurm_bin_dir);
  visit("slurm_poll_seconds", c.slurm_poll_seconds);
}

// Parses coordinator.yaml; INVALID_ARGUMENT naming "<source>:<line>: <field>" for unknown
// keys, wrong types and out-of-range values.
StatusOr<ServiceConfig> ParseServiceConfig(std::string_view yaml, std::string_view source);
StatusOr<ServiceConfig> LoadServiceConfig(const std::string& path);  // + NOT_FOUND

// The host workers dial for a `listen` address: its host, or this machine's name when it
// listens on every interface ("0.0.0.0:7070", "[::]:7070", ":7070"), which is not dialable.
std::string DialableHost(const std::string& listen);

// The local launcher's options that `config` sets (mpirun and its arguments,
// direct_single_process, kill grace, worker_env).
LocalLauncherOptions LocalLauncherOptionsFor(const ServiceConfig& config);
// The slurm launcher's (slurm_bin_dir, slurm_poll_seconds, worker_env).
SlurmLauncherOptions SlurmLauncherOptionsFor(const ServiceConfig& config);

class CoordinatorService {
 public:
  // Opens the store, loads the jobs and starts serving, with the local launcher for
  // `launcher.kind: local` and the slurm launcher for `slurm`. `launcher` and `clock` (not owned)
  // replace the local launcher and the real clock in tests.
  static StatusOr<std::unique_ptr<CoordinatorService>> Start(const ServiceConfig& config,
                                                             Launcher* launcher = nullptr,
                                                             const Clock* clock = nullptr);
  ~CoordinatorService();  // Stop()

  // Stops the tick thread and both servers; closes the store. Idempotent.
  void Stop();
  // Blocks until Stop is called from another thread (or a signal handler's thread).
  void Wait();

  int port() const { return grpc_->port(); }
  int metrics_port() const { return metrics_ ? metrics_->port() : 0; }
  Coordinator* coordinator() { return coordinator_.get(); }
  Authenticator* auth() { return auth_.get(); }
  // The Prometheus exposition of /metrics.
  std::string RenderMetrics() const;

 private:
  CoordinatorService() = default;
  // The /metrics server on config_.metrics_listen. INVALID_ARGUMENT: not host:port.
  Status StartMetrics();
  // The ticker thread: Tick every tick_seconds until Stop.
  void TickUntilStopped();

  ServiceConfig config_;
  RealClock real_clock_;
  std::unique_ptr<LocalLauncher> own_launcher_;  // unless Start was given one
  std::unique_ptr<SlurmLauncher> slurm_launcher_;
  std::unique_ptr<Authenticator> auth_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<RpcHandler> handler_;
  std::unique_ptr<GrpcServer> grpc_;
  std::unique_ptr<MetricsHttpServer> metrics_;
  std::thread ticker_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopped_ = false;
};

}  // namespace fullband::coordinator

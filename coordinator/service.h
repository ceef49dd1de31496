// CoordinatorService: one running coordinator — the store, the job logic, the local
// launcher, authentication, the gRPC server, the /metrics server and the thread that calls
// Coordinator::Tick — built from `coordinator.yaml` (ServiceConfig). `fullband coordinator`
// runs one; tests start one on loopback.
//
//   listen: 127.0.0.1:7070           # gRPC address; port 0 picks a free port
//   advertise: ""                    # address workers dial ("" = listen; this host's name
//                                    #   when listening on every interface)
//   store_dir: fullband-coordinator  # RocksDB (coordinator/FORMAT.md)
//   jobs_dir: fullband-jobs          # logs: <jobs_dir>/<job>/attempt-<n>.out|.err
//   tls_cert: "" / tls_key: ""       # PEM files (scripts/gen_certs.sh); empty = plaintext
//   worker_tls_ca: ""                # the CA workers trust (FULLBAND_TLS_CA); needed with TLS
//   worker_env: []                   # more variable names workers get from this environment
//   tokens_file: ""                  # bearer tokens (coordinator/auth.h); empty = auth off
//   metrics_listen: ""               # host:port of /metrics; empty = off
//   heartbeat_interval_seconds: 10 / heartbeat_timeout_seconds: 60
//   launch_timeout_seconds: 600 / tick_seconds: 0.5
//   mpirun: mpirun / direct_single_process: false / kill_grace_seconds: 10
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
#include "coordinator/auth.h"
#include "coordinator/clock.h"
#include "coordinator/coordinator.h"
#include "coordinator/grpc_server.h"
#include "coordinator/launcher.h"
#include "coordinator/local_launcher.h"
#include "coordinator/metrics_http.h"
#include "coordinator/rpc_handler.h"
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
  std::vector<std::string> worker_env;  // Note [Worker environment] (local_launcher.h)
  std::string tokens_file;
  std::string metrics_listen;
  double heartbeat_interval_seconds = 10;
  double heartbeat_timeout_seconds = 60;
  double launch_timeout_seconds = 600;
  double tick_seconds = 0.5;  // a missed deadline is acted on within one tick
  std::string mpirun = "mpirun";
  bool direct_single_process = false;
  double kill_grace_seconds = 10;
};

// Parses coordinator.yaml; INVALID_ARGUMENT naming "<source>:<line>: <field>" for unknown
// keys, wrong types and out-of-range values.
StatusOr<ServiceConfig> ParseServiceConfig(std::string_view yaml, std::string_view source);
StatusOr<ServiceConfig> LoadServiceConfig(const std::string& path);  // + NOT_FOUND

// The host workers dial for a `listen` address: its host, or this machine's name when it
// listens on every interface ("0.0.0.0:7070", "[::]:7070", ":7070"), which is not dialable.
std::string DialableHost(const std::string& listen);

// The local launcher's options that `config` sets (mpirun, direct_single_process, kill grace).
LocalLauncherOptions LocalLauncherOptionsFor(const ServiceConfig& config);

class CoordinatorService {
 public:
  // Opens the store, loads the jobs and starts serving. `launcher` and `clock` (not owned)
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

  ServiceConfig config_;
  RealClock real_clock_;
  std::unique_ptr<Launcher> own_launcher_;
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

#include "coordinator/service.h"

#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <filesystem>
#include <sstream>

#include "common/file_util.h"
#include "common/logging.h"
#include "common/yaml_util.h"
#include "coordinator/job_metrics.h"
#include "coordinator/local_launcher.h"

namespace fullband::coordinator {

StatusOr<ServiceConfig> ParseServiceConfig(std::string_view yaml, std::string_view source) {
  FB_ASSIGN_OR_RETURN(const YAML::Node root, ParseYaml(yaml, source));
  ServiceConfig c;
  if (root.IsNull()) return c;
  if (!root.IsMap()) return InvalidArgumentError(std::string(source) + ": expected a mapping");
  YamlFieldReader reader(source, "", root);
  VisitFields(c, reader);
  FB_RETURN_IF_ERROR(reader.Finish());
  Status positive;
  VisitFields(c, [&](const char* key, const auto& value) {
    if constexpr (std::is_same_v<std::decay_t<decltype(value)>, double>) {
      if (positive.ok() && !(value > 0)) {
        std::ostringstream number;
        number << value;
        positive = InvalidArgumentError(std::string(source) + ": " + key + ": " + number.str() +
                                        " must be > 0");
      }
    }
  });
  FB_RETURN_IF_ERROR(positive);
  if (c.heartbeat_interval_seconds >= c.heartbeat_timeout_seconds) {
    return InvalidArgumentError(std::string(source) +
                                ": heartbeat_interval_seconds must be below "
                                "heartbeat_timeout_seconds");
  }
  if (c.store_dir.empty()) return InvalidArgumentError(std::string(source) + ": store_dir: empty");

  return c;
}

StatusOr<ServiceConfig> LoadServiceConfig(const std::string& path) {
  FB_ASSIGN_OR_RETURN(const std::string text, ReadFileToString(path));
  return ParseServiceConfig(text, path);
}

std::string DialableHost(const std::string& listen) {
  const std::string host = listen.substr(0, listen.rfind(':'));
  if (host != "0.0.0.0" && host != "::" && host != "[::]" && !host.empty()) return host;
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "127.0.0.1";
  return name;
}

LocalLauncherOptions LocalLauncherOptionsFor(const ServiceConfig& config) {
  LocalLauncherOptions lo;
  lo.mpirun = config.mpirun;
  lo.direct_single_process = config.direct_single_process;
  lo.kill_grace = std::chrono::milliseconds(static_cast<int64_t>(config.kill_grace_seconds * 1000));
  lo.pass_env = config.worker_env;
  lo.mpirun_args = config.mpirun_args;
  return lo;
}

SlurmLauncherOptions SlurmLauncherOptionsFor(const ServiceConfig& config) {
  SlurmLauncherOptions so;
  so.bin_dir = config.slurm_bin_dir;
  so.poll_interval =
      std::chrono::milliseconds(static_cast<int64_t>(config.slurm_poll_seconds * 1000));
  so.pass_env = config.worker_env;
  return so;
}

namespace {

// The coordinator's options that `config` sets, with worker tokens minted, restored and revoked
// by `auth` (none when null).
CoordinatorOptions CoordinatorOptionsFor(const ServiceConfig& config, Authenticator* auth) {
  CoordinatorOptions options;
  options.heartbeat_interval_seconds = config.heartbeat_interval_seconds;
  options.heartbeat_timeout_seconds = config.heartbeat_timeout_seconds;
  options.launch_timeout_seconds = config.launch_timeout_seconds;
  options.jobs_dir = config.jobs_dir;
  options.advertise_address = config.advertise;
  if (!config.worker_tls_ca.empty()) {
    std::error_code ec;
    options.worker_tls_ca = std::filesystem::absolute(config.worker_tls_ca, ec).string();
  }
  if (auth == nullptr) return options;
  options.mint_worker_token = [auth](const std::string& job_id) {
    StatusOr<std::string> token = auth->MintWorkerToken(job_id);
    if (!token.ok()) {
      FB_LOG(ERROR) << "job " << job_id << ": " << token.status().ToString();
      return CoordinatorOptions::MintedToken();
    }
    return CoordinatorOptions::MintedToken{*token, TokenDigestHex(*token)};
  };
  options.restore_worker_token = [auth](const std::string& job_id, const std::string& digest) {
    Status st = auth->RegisterWorkerTokenDigest(job_id, digest);
    if (!st.ok()) FB_LOG(ERROR) << "job " << job_id << ": " << st.ToString();
  };
  options.revoke_worker_tokens = [auth](const std::string& job_id) {
    auth->RevokeWorkerTokens(job_id);
  };
  return options;
}

}  // namespace

StatusOr<std::unique_ptr<CoordinatorService>> CoordinatorService::Start(const ServiceConfig& config,
                                                                        Launcher* launcher,
                                                                        const Clock* clock) {
  if (!config.tls_cert.empty() && config.worker_tls_ca.empty()) {
    return InvalidArgumentError(
        "worker_tls_ca: required with tls_cert (the CA certificate workers trust to reach this "
        "coordinator, e.g. tls/ca.crt)");
  }
  std::unique_ptr<CoordinatorService> s(new CoordinatorService());
  s->config_ = config;
  if (clock == nullptr) clock = &s->real_clock_;
  if (launcher == nullptr) {
    s->own_launcher_ = std::make_unique<LocalLauncher>(LocalLauncherOptionsFor(config));
    launcher = s->own_launcher_.get();
  }
  s->slurm_launcher_ = std::make_unique<SlurmLauncher>(SlurmLauncherOptionsFor(config));
  if (!config.tokens_file.empty()) {
    s->auth_ = std::make_unique<Authenticator>();
    FB_RETURN_IF_ERROR(s->auth_->LoadTokensFile(config.tokens_file));
  }
  FB_ASSIGN_OR_RETURN(s->store_, Store::Open(config.store_dir));

  FB_ASSIGN_OR_RETURN(s->coordinator_,
                      Coordinator::Create(CoordinatorOptionsFor(config, s->auth_.get()), clock,
                                          {{LauncherKind::kLocal, launcher},
                                           {LauncherKind::kSlurm, s->slurm_launcher_.get()}},
                                          s->store_.get()));
  s->handler_ = std::make_unique<RpcHandler>(s->coordinator_.get(), s->auth_.get());
  GrpcServerOptions go;
  go.address = config.listen;
  go.tls_cert_file = config.tls_cert;
  go.tls_key_file = config.tls_key;
  s->grpc_ = std::make_unique<GrpcServer>(go, s->handler_.get());
  FB_RETURN_IF_ERROR(s->grpc_->Start().WithContext("gRPC server"));
  if (config.advertise.empty()) {
    s->coordinator_->set_advertise_address(DialableHost(config.listen) + ":" +
                                           std::to_string(s->grpc_->port()));
  }
  if (!config.metrics_listen.empty()) FB_RETURN_IF_ERROR(s->StartMetrics());
  s->ticker_ = std::thread([self = s.get()] { self->TickUntilStopped(); });
  return s;
}

Status CoordinatorService::StartMetrics() {
  const std::string& listen = config_.metrics_listen;
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos) {
    return InvalidArgumentError("metrics_listen: expected host:port, got " + listen);
  }
  metrics_ = std::make_unique<MetricsHttpServer>(listen.substr(0, colon),
                                                 std::atoi(listen.c_str() + colon + 1),
                                                 [this] { return RenderMetrics(); });
  return metrics_->Start().WithContext("metrics server");
}

void CoordinatorService::TickUntilStopped() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopped_) {
    lock.unlock();
    coordinator_->Tick();
    lock.lock();
    cv_.wait_for(lock, std::chrono::duration<double>(config_.tick_seconds),
                 [this] { return stopped_; });
  }
}

CoordinatorService::~CoordinatorService() { Stop(); }

void CoordinatorService::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
  }
  cv_.notify_all();
  if (ticker_.joinable()) ticker_.join();
  if (metrics_) metrics_->Stop();
  if (grpc_) grpc_->Shutdown();
}

void CoordinatorService::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return stopped_; });
}

std::string CoordinatorService::RenderMetrics() const {
  PrometheusWriter w;
  WriteJobMetrics(coordinator_->ListJobs("", /*include_finished=*/true), w);
  if (auth_) auth_->RenderMetrics(w);
  std::vector<std::pair<std::string, LauncherCounts>> launchers;
  if (own_launcher_) launchers.emplace_back("local", own_launcher_->Counts());
  launchers.emplace_back("slurm", slurm_launcher_->Counts());
  WriteLauncherMetrics(launchers, w);
  slurm_launcher_->RenderCommandMetrics(w);
  if (metrics_) metrics_->RenderMetrics(w);
  WriteProcessMetrics(w);
  return w.Take();
}

}  // namespace fullband::coordinator

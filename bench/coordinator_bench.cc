// coordinator_bench: the coordinator service in this process, over TLS with bearer tokens on
// loopback, driven by asynchronous clients in the same process (client and server share the
// machine's cores). Prints one JSON object:
//   report_step: durable ReportStep/s and p50/p99 latency at --in-flight calls outstanding,
//                and whether the ledger equals the acknowledged reports;
//   lease_batches: LeaseBatches/s and p50/p99 at --in-flight (leases of leased steps: no write);
//   heartbeats: --groups worker groups heartbeating every --heartbeat-interval seconds, and the
//                CPU of this whole process (server and clients) in % of one core;
//   groups_traffic: the same groups each sending, per slot, a heartbeat and a lease + report
//                of its next step; every acknowledged report must be counted exactly once;
//   failure: seconds from a worker group's last heartbeat to the relaunch, minus the timeout.
// `coordinator_bench --help` lists the flags.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <thread>

#include "bench/bench_cli.h"
#include "bench/bench_util.h"
#include "coordinator/client.h"
#include "coordinator/service.h"
#include "coordinator/tls.h"
#include "proto/config_convert.h"
#include "proto/coordinator.grpc.pb.h"

namespace fullband::bench {
namespace {

using coordinator::ClientOptions;
using Clock = std::chrono::steady_clock;

// Launches nothing: remembers the worker token each attempt would get.
class NullLauncher final : public coordinator::Launcher {
 public:
  std::string_view name() const override { return "null"; }
  StatusOr<std::string> Launch(const coordinator::LaunchSpec& spec) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = spec.env.find("FULLBAND_WORKER_TOKEN");
    tokens_[spec.job_id] = it == spec.env.end() ? "" : it->second;
    launched_at_[spec.job_id + "/" + std::to_string(spec.attempt)] = Clock::now();
    cv_.notify_all();
    return spec.job_id + "/" + std::to_string(spec.attempt);
  }
  StatusOr<coordinator::LaunchState> Poll(const std::string&) override {
    return coordinator::LaunchState{};
  }
  Status Kill(const std::string&) override { return OkStatus(); }

  std::string WaitToken(const std::string& job_id) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return tokens_.count(job_id) > 0; });
    return tokens_[job_id];
  }
  Clock::time_point WaitLaunch(const std::string& key) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return launched_at_.count(key) > 0; });
    return launched_at_[key];
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> tokens_;
  std::map<std::string, Clock::time_point> launched_at_;
};

struct Latencies {
  std::mutex mu;
  std::vector<double> ms;
  int64_t errors = 0;
  std::string first_error;
};

double Percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// Keeps `in_flight` calls outstanding for `seconds`; `start(slot, done)` issues one call and
// calls done(status) when it completes.
template <typename Start>
void ClosedLoop(int in_flight, double seconds, Latencies& lat, Start&& start) {
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  std::mutex mu;
  std::condition_variable cv;
  int active = in_flight;
  std::function<void(int)> issue = [&](int slot) {
    const auto t0 = Clock::now();
    start(slot, [&, slot, t0](const grpc::Status& s) {
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      {
        std::lock_guard<std::mutex> lock(lat.mu);
        lat.ms.push_back(ms);
        if (!s.ok() && lat.errors++ == 0) lat.first_error = s.error_message();
      }
      if (Clock::now() < end) {
        issue(slot);
      } else {
        std::lock_guard<std::mutex> lock(mu);
        if (--active == 0) cv.notify_all();
      }
    });
  };
  for (int i = 0; i < in_flight; ++i) issue(i);
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return active == 0; });
}

struct Args {
  double seconds = 10, heartbeat_interval = 10, idle_seconds = 5;
  int in_flight = 128, channels = 4, groups = 1000;
  std::string dir = (std::filesystem::temp_directory_path() /
                     ("fullband-coordinator-bench-" + std::to_string(getpid())))
                        .string();
};

// The exit code when the command line says to stop: after --help, or bad usage.
std::optional<int> ParseArgs(int argc, char** argv, Args* a) {
  CommandLine cl("coordinator_bench",
                 "The coordinator service over TLS with bearer tokens on loopback, driven by "
                 "clients in the same process; prints one JSON object.");
  cl.AddPositiveNumber("--seconds", &a->seconds, "how long each closed loop runs");
  cl.AddInt("--in-flight", &a->in_flight, "calls outstanding in the closed loops", 1);
  cl.AddInt("--channels", &a->channels, "connections the calls are spread over", 1);
  cl.AddInt("--groups", &a->groups, "worker groups heartbeating", 1);
  cl.AddPositiveNumber("--heartbeat-interval", &a->heartbeat_interval,
                       "seconds between a group's heartbeats");
  cl.AddPositiveNumber("--idle-seconds", &a->idle_seconds,
                       "how long the idle service's CPU is measured, every group registered");
  cl.AddString("--dir", &a->dir, "DIR", "the service's store, jobs and TLS files (removed after)");
  return cl.Parse(argc, argv);
}

int Main(int argc, char** argv) {
  Args args;
  if (const std::optional<int> exit = ParseArgs(argc, argv, &args)) return *exit;
  const double seconds = args.seconds;
  const int in_flight = args.in_flight, channels = args.channels, groups = args.groups;
  const double hb_interval = args.heartbeat_interval;
  const std::filesystem::path dir = args.dir;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string d = dir.string();
  const std::string certs =
      std::string(FULLBAND_GEN_CERTS_SCRIPT) + " --dir " + d + "/tls --days 2 > /dev/null";
  if (std::system(certs.c_str()) != 0) return 1;
  const std::string admin = "bench-admin-token-0123456789abcdef0123456789";
  std::ofstream(d + "/tokens.yaml")
      << "version: 1\ntokens:\n  - {token: " << admin << ", role: admin, user: bench}\n";
  std::filesystem::permissions(
      d + "/tokens.yaml", std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  coordinator::ServiceConfig sc;
  sc.listen = "127.0.0.1:0";
  sc.store_dir = d + "/store";
  sc.jobs_dir = d + "/jobs";
  sc.tls_cert = d + "/tls/server.crt";
  sc.worker_tls_ca = d + "/tls/ca.crt";
  sc.tls_key = d + "/tls/server.key";
  sc.tokens_file = d + "/tokens.yaml";
  sc.heartbeat_interval_seconds = hb_interval;
  sc.heartbeat_timeout_seconds = std::max(60.0, 3 * hb_interval);
  NullLauncher launcher;
  auto service = coordinator::CoordinatorService::Start(sc, &launcher);
  if (!service.ok()) {
    std::fprintf(stderr, "coordinator_bench: %s\n", service.status().ToString().c_str());
    return 1;
  }
  ClientOptions o;
  o.address = "localhost:" + std::to_string((*service)->port());
  o.tls_ca_file = d + "/tls/ca.crt";
  o.token = admin;
  auto jobs = coordinator::JobClient::Connect(o).value();

  Config config;
  config.model.vocab_size = 512;
  config.model.eod_id = 0;
  config.model.d_model = 64;
  config.model.n_layers = 2;
  config.model.n_heads = 4;
  config.model.n_kv_heads = 2;
  config.model.head_dim = 16;
  config.model.ffn_dim = 128;
  config.data.batch_size = 4;
  config.data.seq_len = 32;
  config.budget.amount = 128.0 * 4'000'000;
  config.launcher.command = {"none"};
  config.launcher.backoff_seconds = 0;
  proto::JobSpec spec;
  spec.set_name("bench");
  *spec.mutable_config() = ToProto(config);

  // One job for reports and leases; stubs on `channels` separate connections.
  const std::string job = *jobs->Submit(spec);
  ClientOptions wo = o;
  wo.token = launcher.WaitToken(job);
  std::vector<std::unique_ptr<proto::WorkerService::Stub>> stubs;
  for (int c = 0; c < channels; ++c) {
    grpc::ChannelArguments args;
    args.SetInt("fullband.bench_channel", c);  // a connection of its own
    auto credentials = coordinator::MakeClientTlsCredentials(wo.tls_ca_file);
    stubs.push_back(
        proto::WorkerService::NewStub(grpc::CreateCustomChannel(wo.address, *credentials, args)));
  }
  const auto context = [&](grpc::ClientContext* c) {
    c->AddMetadata("authorization", "Bearer " + wo.token);
    c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  };
  const uint64_t incarnation = 7;
  // The job registers once it is LAUNCHING (the tick after the launcher was called).
  for (;;) {
    grpc::ClientContext c;
    context(&c);
    proto::RegisterWorkerGroupRequest req;
    req.set_job_id(job);
    req.set_incarnation(incarnation);
    req.set_world_size(1);
    proto::RegisterWorkerGroupResponse resp;
    const grpc::Status s = stubs[0]->RegisterWorkerGroup(&c, req, &resp);
    if (s.ok()) break;
    if (s.error_code() != grpc::StatusCode::FAILED_PRECONDITION) {
      std::fprintf(stderr, "coordinator_bench: register: %s\n", s.error_message().c_str());
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  constexpr int64_t kLeased = 2'000'000;
  for (int64_t from = 0; from < kLeased; from += 1024) {
    grpc::ClientContext c;
    context(&c);
    proto::LeaseBatchesRequest req;
    req.set_job_id(job);
    req.set_incarnation(incarnation);
    req.set_from_step(from);
    req.set_count(1024);
    proto::LeaseBatchesResponse resp;
    if (!stubs[0]->LeaseBatches(&c, req, &resp).ok()) return 1;
  }

  // ---- Baseline in the same run: gRPC health checks (a trivial unary RPC of the same server,
  // channels and TLS, without auth or a store) at the same concurrency.
  std::vector<std::unique_ptr<grpc::GenericStub>> generic;
  for (int c = 0; c < channels; ++c) {
    grpc::ChannelArguments args;
    args.SetInt("fullband.bench_channel", c);
    auto credentials = coordinator::MakeClientTlsCredentials(wo.tls_ca_file);
    generic.push_back(std::make_unique<grpc::GenericStub>(
        grpc::CreateCustomChannel(wo.address, *credentials, args)));
  }
  Latencies base_lat;
  double cpu_base = CpuSeconds();
  auto tb = Clock::now();
  ClosedLoop(in_flight, seconds, base_lat, [&](int slot, auto done) {
    struct Call {
      grpc::ClientContext context;
      grpc::Slice empty{std::string{}};
      grpc::ByteBuffer req{&empty, 1};
      grpc::ByteBuffer resp;
    };
    auto* call = new Call;
    generic[slot % channels]->UnaryCall(&call->context, "/grpc.health.v1.Health/Check",
                                        grpc::StubOptions(), &call->req, &call->resp,
                                        [call, done](grpc::Status s) {
                                          delete call;
                                          done(s);
                                        });
  });
  const double base_seconds = std::chrono::duration<double>(Clock::now() - tb).count();
  cpu_base = CpuSeconds() - cpu_base;

  // ---- ReportStep, durable before acknowledged.
  std::atomic<int64_t> next_step{0}, acked{0};
  Latencies report_lat;
  const coordinator::Store::Stats before = (*service)->coordinator()->store()->stats();
  double cpu_start = CpuSeconds();
  auto t0 = Clock::now();
  ClosedLoop(in_flight, seconds, report_lat, [&](int slot, auto done) {
    struct Call {
      grpc::ClientContext context;
      proto::ReportStepRequest req;
      proto::ReportStepResponse resp;
    };
    auto* call = new Call;
    context(&call->context);
    call->req.set_job_id(job);
    call->req.set_incarnation(incarnation);
    call->req.set_step(next_step++);
    call->req.set_tokens(128);
    call->req.set_passes(1);
    call->req.add_losses(2.0);
    stubs[slot % channels]->async()->ReportStep(&call->context, &call->req, &call->resp,
                                                [call, done, &acked](grpc::Status s) {
                                                  if (s.ok() && !call->resp.duplicate()) ++acked;
                                                  delete call;
                                                  done(s);
                                                });
  });
  const double report_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  const double report_cpu = CpuSeconds() - cpu_start;
  const coordinator::Store::Stats after = (*service)->coordinator()->store()->stats();
  const int64_t counted = jobs->Get(job)->ledger().steps();

  // ---- LeaseBatches of leased steps (no write).
  Latencies lease_lat;
  std::atomic<int64_t> lease_from{0};
  cpu_start = CpuSeconds();
  t0 = Clock::now();
  ClosedLoop(in_flight, seconds, lease_lat, [&](int slot, auto done) {
    struct Call {
      grpc::ClientContext context;
      proto::LeaseBatchesRequest req;
      proto::LeaseBatchesResponse resp;
    };
    auto* call = new Call;
    context(&call->context);
    call->req.set_job_id(job);
    call->req.set_incarnation(incarnation);
    call->req.set_from_step((lease_from += 16) % (kLeased - 16));
    call->req.set_count(16);
    stubs[slot % channels]->async()->LeaseBatches(&call->context, &call->req, &call->resp,
                                                  [call, done](grpc::Status s) {
                                                    delete call;
                                                    done(s);
                                                  });
  });
  const double lease_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  const double lease_cpu = CpuSeconds() - cpu_start;

  // ---- Heartbeats of `groups` worker groups, each every hb_interval seconds.
  std::vector<std::pair<std::string, std::string>> group_jobs;  // (job, token)
  proto::JobSpec group_spec = spec;                             // a small plan each: 1,000 steps
  group_spec.mutable_config()->mutable_budget()->set_amount(128.0 * 1000);
  for (int g = 0; g < groups; ++g) group_jobs.emplace_back(*jobs->Submit(group_spec), "");
  for (auto& [id, token] : group_jobs) token = launcher.WaitToken(id);
  for (auto& [id, token] : group_jobs) {
    for (;;) {
      grpc::ClientContext c;
      c.AddMetadata("authorization", "Bearer " + token);
      proto::RegisterWorkerGroupRequest req;
      req.set_job_id(id);
      req.set_incarnation(incarnation);
      req.set_world_size(1);
      proto::RegisterWorkerGroupResponse resp;
      const grpc::Status s = stubs[0]->RegisterWorkerGroup(&c, req, &resp);
      if (s.ok()) break;
      if (s.error_code() != grpc::StatusCode::FAILED_PRECONDITION) return 1;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  // The same service with every group registered and no traffic: the floor of the CPU cost.
  const double idle_seconds = args.idle_seconds;
  double idle_cpu = CpuSeconds();
  std::this_thread::sleep_for(std::chrono::duration<double>(idle_seconds));
  idle_cpu = CpuSeconds() - idle_cpu;
  Latencies hb_lat;
  std::atomic<int64_t> hb_pending{0};
  const double hb_seconds = std::max(seconds, 2 * hb_interval);
  const double cpu0 = CpuSeconds();
  t0 = Clock::now();
  const double gap = hb_interval / groups;
  for (int64_t i = 0;; ++i) {
    const auto at =
        t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(gap * i));
    if (at - t0 > std::chrono::duration<double>(hb_seconds)) break;
    std::this_thread::sleep_until(at);
    const auto& [id, token] = group_jobs[i % groups];
    struct Call {
      grpc::ClientContext context;
      proto::HeartbeatRequest req;
      proto::HeartbeatResponse resp;
      Clock::time_point start;
    };
    auto* call = new Call;
    call->context.AddMetadata("authorization", "Bearer " + token);
    call->req.set_job_id(id);
    call->req.set_incarnation(incarnation);
    call->start = Clock::now();
    ++hb_pending;
    stubs[i % channels]->async()->Heartbeat(
        &call->context, &call->req, &call->resp, [call, &hb_lat, &hb_pending](grpc::Status s) {
          const double ms =
              std::chrono::duration<double, std::milli>(Clock::now() - call->start).count();
          {
            std::lock_guard<std::mutex> lock(hb_lat.mu);
            hb_lat.ms.push_back(ms);
            if (!s.ok() && hb_lat.errors++ == 0) hb_lat.first_error = s.error_message();
          }
          delete call;
          --hb_pending;
        });
  }
  while (hb_pending.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const double hb_wall = std::chrono::duration<double>(Clock::now() - t0).count();
  const double hb_cpu = CpuSeconds() - cpu0;

  // ---- The same groups heartbeating, leasing and reporting: each slot sends a heartbeat and
  // leases then reports the group's next step. Every acknowledged report must be counted once.
  std::vector<std::atomic<int64_t>> group_acked(groups);
  std::vector<int64_t> group_next(groups, 0);
  Latencies traffic_lat;
  std::atomic<int64_t> traffic_pending{0};
  const double traffic_gap = hb_interval / groups;
  const auto tt = Clock::now();
  for (int64_t i = 0;; ++i) {
    const auto at = tt + std::chrono::duration_cast<Clock::duration>(
                             std::chrono::duration<double>(traffic_gap * i));
    if (at - tt > std::chrono::duration<double>(seconds)) break;
    std::this_thread::sleep_until(at);
    const int g = static_cast<int>(i % groups);
    const auto& [id, token] = group_jobs[g];
    struct Call {
      grpc::ClientContext hb_context, lease_context, report_context;
      proto::HeartbeatRequest hb;
      proto::HeartbeatResponse hb_resp;
      proto::LeaseBatchesRequest lease;
      proto::LeaseBatchesResponse lease_resp;
      proto::ReportStepRequest report;
      proto::ReportStepResponse report_resp;
      Clock::time_point start;
    };
    auto call = std::make_shared<Call>();  // freed with the last of its three callbacks
    for (grpc::ClientContext* c :
         {&call->hb_context, &call->lease_context, &call->report_context}) {
      c->AddMetadata("authorization", "Bearer " + token);
    }
    call->hb.set_job_id(id);
    call->hb.set_incarnation(incarnation);
    call->lease.set_job_id(id);
    call->lease.set_incarnation(incarnation);
    call->lease.set_from_step(group_next[g]);
    call->lease.set_count(1);
    call->report.set_job_id(id);
    call->report.set_incarnation(incarnation);
    call->report.set_step(group_next[g]++);
    call->report.set_tokens(128);
    call->report.set_passes(1);
    call->report.add_losses(2.0);
    call->start = Clock::now();
    traffic_pending += 2;
    auto* stub = stubs[i % channels].get();
    const auto finish = [&traffic_lat, &traffic_pending](const grpc::Status& s,
                                                         Clock::time_point start) {
      std::lock_guard<std::mutex> lock(traffic_lat.mu);
      traffic_lat.ms.push_back(
          std::chrono::duration<double, std::milli>(Clock::now() - start).count());
      if (!s.ok() && traffic_lat.errors++ == 0) traffic_lat.first_error = s.error_message();
    };
    stub->async()->Heartbeat(&call->hb_context, &call->hb, &call->hb_resp,
                             [call, finish, &traffic_pending](grpc::Status s) {
                               finish(s, call->start);
                               --traffic_pending;
                             });
    stub->async()->LeaseBatches(
        &call->lease_context, &call->lease, &call->lease_resp,
        [call, stub, g, finish, &group_acked, &traffic_pending](grpc::Status s) {
          finish(s, call->start);
          if (!s.ok()) {
            --traffic_pending;
            return;
          }
          const Clock::time_point report_start = Clock::now();
          stub->async()->ReportStep(
              &call->report_context, &call->report, &call->report_resp,
              [call, g, finish, report_start, &group_acked, &traffic_pending](grpc::Status s) {
                finish(s, report_start);
                if (s.ok() && !call->report_resp.duplicate()) ++group_acked[g];
                --traffic_pending;
              });
        });
  }
  while (traffic_pending.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const double traffic_wall = std::chrono::duration<double>(Clock::now() - tt).count();
  int64_t traffic_acked = 0, traffic_counted = 0, mismatched_jobs = 0;
  std::map<std::string, int64_t> counted_by_job;
  const std::vector<proto::Job> all_jobs = jobs->List(/*include_finished=*/true).value();
  for (const proto::Job& j : all_jobs) {
    counted_by_job[j.id()] = j.ledger().steps();
  }
  for (int g = 0; g < groups; ++g) {
    traffic_acked += group_acked[g].load();
    traffic_counted += counted_by_job[group_jobs[g].first];
    if (counted_by_job[group_jobs[g].first] != group_acked[g].load()) ++mismatched_jobs;
  }

  // ---- Failure detection: a group that stops heartbeating is relaunched after the timeout.
  (*service)->Stop();
  service->reset();
  coordinator::ServiceConfig fc = sc;
  fc.store_dir = d + "/store-failure";
  fc.heartbeat_interval_seconds = 0.5;
  fc.heartbeat_timeout_seconds = 2;
  fc.tick_seconds = 0.5;  // the default
  NullLauncher failure_launcher;
  auto failure_service = coordinator::CoordinatorService::Start(fc, &failure_launcher);
  o.address = "localhost:" + std::to_string((*failure_service)->port());
  auto failure_jobs = coordinator::JobClient::Connect(o).value();
  const std::string fjob = *failure_jobs->Submit(spec);
  ClientOptions fo = o;
  fo.token = failure_launcher.WaitToken(fjob);
  Clock::time_point last_beat;
  {
    std::unique_ptr<coordinator::WorkerClient> w;
    for (;;) {
      auto r = coordinator::WorkerClient::Register(fo, fjob, 0, 1);
      if (r.ok()) {
        w = std::move(*r);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    last_beat = Clock::now();  // the registration is the last sign of life; no beat follows
    w.reset();
  }
  const Clock::time_point relaunched = failure_launcher.WaitLaunch(fjob + "/1");
  const double detect =
      std::chrono::duration<double>(relaunched - last_beat).count() - fc.heartbeat_timeout_seconds;

  std::printf(
      "{\"bench\": \"coordinator\", \"cpu\": \"%s\", \"cores\": %u, \"tls\": true, "
      "\"auth\": true,\n"
      " \"baseline_health_check\": {\"in_flight\": %d, \"rpc_per_s\": %.0f, \"p50_ms\": %.2f, "
      "\"p99_ms\": %.2f, \"errors\": %lld, \"process_cpu_us_per_rpc\": %.1f},\n"
      " \"report_step\": {\"in_flight\": %d, \"channels\": %d, \"seconds\": %.2f, "
      "\"rpcs\": %zu, \"rpc_per_s\": %.0f, \"p50_ms\": %.2f, \"p99_ms\": %.2f, \"errors\": %lld, "
      "\"acknowledged\": %lld, \"counted\": %lld, \"synced_writes\": %llu, "
      "\"reports_per_sync\": %.1f, \"process_cpu_us_per_rpc\": %.1f},\n"
      " \"lease_batches\": {\"in_flight\": %d, \"steps_per_lease\": 16, \"seconds\": %.2f, "
      "\"rpcs\": %zu, \"rpc_per_s\": %.0f, \"p50_ms\": %.2f, \"p99_ms\": %.2f, \"errors\": %lld, "
      "\"process_cpu_us_per_rpc\": %.1f},\n"
      " \"heartbeats\": {\"groups\": %d, \"interval_s\": %.1f, \"seconds\": %.1f, \"rpcs\": %zu, "
      "\"p50_ms\": %.2f, \"p99_ms\": %.2f, \"errors\": %lld, "
      "\"process_cpu_percent_of_one_core\": %.2f, \"idle_process_cpu_percent\": %.2f},\n"
      " \"groups_traffic\": {\"groups\": %d, \"seconds\": %.1f, \"rpcs\": %zu, \"p50_ms\": %.2f, "
      "\"p99_ms\": %.2f, \"errors\": %lld, \"reports_acknowledged\": %lld, "
      "\"reports_counted\": %lld, \"jobs_where_counted_differs\": %lld},\n"
      " \"failure\": {\"heartbeat_timeout_s\": %.1f, \"tick_s\": %.2f, "
      "\"relaunch_after_timeout_s\": %.3f}}\n",
      CpuModel().c_str(), std::thread::hardware_concurrency(), in_flight,
      base_lat.ms.size() / base_seconds, Percentile(base_lat.ms, 0.5),
      Percentile(base_lat.ms, 0.99), static_cast<long long>(base_lat.errors),
      1e6 * cpu_base / std::max<size_t>(1, base_lat.ms.size()), in_flight, channels, report_seconds,
      report_lat.ms.size(), report_lat.ms.size() / report_seconds, Percentile(report_lat.ms, 0.5),
      Percentile(report_lat.ms, 0.99), static_cast<long long>(report_lat.errors),
      static_cast<long long>(acked.load()), static_cast<long long>(counted),
      static_cast<unsigned long long>(after.synced_writes - before.synced_writes),
      static_cast<double>(after.batches - before.batches) /
          std::max<uint64_t>(1, after.synced_writes - before.synced_writes),
      1e6 * report_cpu / std::max<size_t>(1, report_lat.ms.size()), in_flight, lease_seconds,
      lease_lat.ms.size(), lease_lat.ms.size() / lease_seconds, Percentile(lease_lat.ms, 0.5),
      Percentile(lease_lat.ms, 0.99), static_cast<long long>(lease_lat.errors),
      1e6 * lease_cpu / std::max<size_t>(1, lease_lat.ms.size()), groups, hb_interval, hb_wall,
      hb_lat.ms.size(), Percentile(hb_lat.ms, 0.5), Percentile(hb_lat.ms, 0.99),
      static_cast<long long>(hb_lat.errors), 100 * hb_cpu / hb_wall, 100 * idle_cpu / idle_seconds,
      groups, traffic_wall, traffic_lat.ms.size(), Percentile(traffic_lat.ms, 0.5),
      Percentile(traffic_lat.ms, 0.99), static_cast<long long>(traffic_lat.errors),
      static_cast<long long>(traffic_acked), static_cast<long long>(traffic_counted),
      static_cast<long long>(mismatched_jobs), fc.heartbeat_timeout_seconds, fc.tick_seconds,
      detect);
  if (report_lat.errors > 0)
    std::fprintf(stderr, "first report error: %s\n", report_lat.first_error.c_str());
  (*failure_service)->Stop();
  std::filesystem::remove_all(dir);
  return counted == acked.load() && report_lat.errors == 0 && mismatched_jobs == 0 &&
                 traffic_lat.errors == 0
             ? 0
             : 1;
}

}  // namespace
}  // namespace fullband::bench

int main(int argc, char** argv) { return fullband::bench::Main(argc, argv); }

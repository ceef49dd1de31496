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

// The latencies of one kind of call, recorded from the callbacks of gRPC's threads.
struct Latencies {
  std::mutex mu;
  std::vector<double> ms;
  int64_t errors = 0;
  std::string first_error;

  // A call that took `call_ms` and ended with `s`.
  void Add(double call_ms, const grpc::Status& s) {
    std::lock_guard<std::mutex> lock(mu);
    ms.push_back(call_ms);
    if (!s.ok() && errors++ == 0) first_error = s.error_message();
  }
};

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

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

// One asynchronous unary call of a stub's async() interface: what it needs alive until its
// callback runs.
template <typename Request, typename Response>
struct AsyncCall {
  grpc::ClientContext context;
  Request req;
  Response resp;
};

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
      lat.Add(MsSince(t0), s);
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

// A closed loop's latencies, its wall seconds and the CPU seconds of the whole process.
struct LoopResult {
  Latencies lat;
  double seconds = 0, cpu = 0;
};

template <typename Start>
void TimedClosedLoop(int in_flight, double seconds, LoopResult* out, Start&& start) {
  const double cpu0 = CpuSeconds();
  const auto t0 = Clock::now();
  ClosedLoop(in_flight, seconds, out->lat, std::forward<Start>(start));
  out->seconds = SecondsSince(t0);
  out->cpu = CpuSeconds() - cpu0;
}

// Calls issue(i) for i = 0, 1, ... at t0 + i * gap (t0: now) while at most `seconds` have
// passed, then waits until `pending` is 0; returns the seconds from t0 to then.
double PacedLoop(double gap, double seconds, const std::atomic<int64_t>& pending,
                 const std::function<void(int64_t)>& issue) {
  const auto t0 = Clock::now();
  for (int64_t i = 0;; ++i) {
    const auto at =
        t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(gap * i));
    if (at - t0 > std::chrono::duration<double>(seconds)) break;
    std::this_thread::sleep_until(at);
    issue(i);
  }
  while (pending.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return SecondsSince(t0);
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

// The bearer token of the service's one admin, who submits the jobs.
constexpr char kAdminToken[] = "bench-admin-token-0123456789abcdef0123456789";
// The incarnation of every worker group the benchmark registers.
constexpr uint64_t kIncarnation = 7;
// Steps of the first job leased before the loops: LeaseBatches then leases leased steps.
constexpr int64_t kLeased = 2'000'000;

// Writes the TLS files (scripts/gen_certs.sh) and a tokens file with one admin, kAdminToken,
// into `d`. False when the script fails.
bool WriteCredentials(const std::string& d) {
  const std::string certs =
      std::string(FULLBAND_GEN_CERTS_SCRIPT) + " --dir " + d + "/tls --days 2 > /dev/null";
  if (std::system(certs.c_str()) != 0) return false;
  std::ofstream(d + "/tokens.yaml")
      << "version: 1\ntokens:\n  - {token: " << kAdminToken << ", role: admin, user: bench}\n";
  std::filesystem::permissions(
      d + "/tokens.yaml", std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  return true;
}

// The service on a free loopback port, with the files of WriteCredentials and its store and
// jobs under `d`.
coordinator::ServiceConfig BenchServiceConfig(const std::string& d, double hb_interval) {
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
  return sc;
}

// The job the benchmark submits: a small model, 4,000,000 steps of 128 tokens, launched by
// nothing (NullLauncher) and relaunched at once.
proto::JobSpec BenchJobSpec() {
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
  return spec;
}

// A TLS channel to `address` on a connection of its own: channels with different arguments
// (`c`) do not share one.
std::shared_ptr<grpc::Channel> BenchChannel(const std::string& address, const std::string& ca,
                                            int c) {
  grpc::ChannelArguments args;
  args.SetInt("fullband.bench_channel", c);
  return grpc::CreateCustomChannel(address, *coordinator::MakeClientTlsCredentials(ca), args);
}

// Registers a worker group of one for `job` at kIncarnation, waiting (5 ms between tries) for
// the job to be LAUNCHING, the tick after the launcher was called. `prepare` sets up each
// try's context. The status of the last try.
grpc::Status RegisterWhenLaunching(proto::WorkerService::Stub* stub, const std::string& job,
                                   const std::function<void(grpc::ClientContext*)>& prepare) {
  for (;;) {
    grpc::ClientContext c;
    prepare(&c);
    proto::RegisterWorkerGroupRequest req;
    req.set_job_id(job);
    req.set_incarnation(kIncarnation);
    req.set_world_size(1);
    proto::RegisterWorkerGroupResponse resp;
    const grpc::Status s = stub->RegisterWorkerGroup(&c, req, &resp);
    if (s.error_code() != grpc::StatusCode::FAILED_PRECONDITION) return s;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// The service under test, the one job the loops use and that job's worker stubs on --channels
// connections (StartService; RegisterAndLease then registers the worker group).
struct Fixture {
  Args args;
  coordinator::ServiceConfig config;
  NullLauncher launcher;  // outlives the service
  std::unique_ptr<coordinator::CoordinatorService> service;
  ClientOptions admin;
  std::unique_ptr<coordinator::JobClient> jobs;
  proto::JobSpec spec;
  std::string job;
  ClientOptions worker;  // the job's worker token
  std::vector<std::unique_ptr<proto::WorkerService::Stub>> stubs;

  // The worker's bearer token and a deadline of 30 s.
  void Prepare(grpc::ClientContext* c) const {
    c->AddMetadata("authorization", "Bearer " + worker.token);
    c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  }
  // The stub of the connection that call `i` goes over.
  proto::WorkerService::Stub* stub(int64_t i) const { return stubs[i % args.channels].get(); }
};

// Starts the service in args.dir (created afresh), submits the job and connects its worker's
// stubs. False, with a line on stderr, when the service does not start.
bool StartService(Fixture* f) {
  const std::string d = f->args.dir;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  if (!WriteCredentials(d)) return false;
  f->config = BenchServiceConfig(d, f->args.heartbeat_interval);
  auto service = coordinator::CoordinatorService::Start(f->config, &f->launcher);
  if (!service.ok()) {
    std::fprintf(stderr, "coordinator_bench: %s\n", service.status().ToString().c_str());
    return false;
  }
  f->service = std::move(*service);
  f->admin.address = "localhost:" + std::to_string(f->service->port());
  f->admin.tls_ca_file = d + "/tls/ca.crt";
  f->admin.token = kAdminToken;
  f->jobs = coordinator::JobClient::Connect(f->admin).value();
  f->spec = BenchJobSpec();
  f->job = *f->jobs->Submit(f->spec);
  f->worker = f->admin;
  f->worker.token = f->launcher.WaitToken(f->job);
  for (int c = 0; c < f->args.channels; ++c) {
    f->stubs.push_back(
        proto::WorkerService::NewStub(BenchChannel(f->worker.address, f->worker.tls_ca_file, c)));
  }
  return true;
}

// Registers the job's worker group and leases its first kLeased steps. False, with a line on
// stderr, when the coordinator refuses.
bool RegisterAndLease(const Fixture& f) {
  const grpc::Status s =
      RegisterWhenLaunching(f.stubs[0].get(), f.job, [&](grpc::ClientContext* c) { f.Prepare(c); });
  if (!s.ok()) {
    std::fprintf(stderr, "coordinator_bench: register: %s\n", s.error_message().c_str());
    return false;
  }
  for (int64_t from = 0; from < kLeased; from += 1024) {
    grpc::ClientContext c;
    f.Prepare(&c);
    proto::LeaseBatchesRequest req;
    req.set_job_id(f.job);
    req.set_incarnation(kIncarnation);
    req.set_from_step(from);
    req.set_count(1024);
    proto::LeaseBatchesResponse resp;
    const grpc::Status lease = f.stubs[0]->LeaseBatches(&c, req, &resp);
    if (!lease.ok()) {
      std::fprintf(stderr, "coordinator_bench: lease: %s\n", lease.error_message().c_str());
      return false;
    }
  }
  return true;
}

// Sends one heartbeat of `job`'s worker group; counts it in `pending` until its answer, whose
// latency goes into `lat`.
void IssueHeartbeat(proto::WorkerService::Stub* stub, const std::string& job,
                    const std::string& token, Latencies* lat, std::atomic<int64_t>* pending) {
  struct Call : AsyncCall<proto::HeartbeatRequest, proto::HeartbeatResponse> {
    Clock::time_point start;
  };
  auto* call = new Call;
  call->context.AddMetadata("authorization", "Bearer " + token);
  call->req.set_job_id(job);
  call->req.set_incarnation(kIncarnation);
  call->start = Clock::now();
  ++*pending;
  stub->async()->Heartbeat(&call->context, &call->req, &call->resp,
                           [call, lat, pending](grpc::Status s) {
                             lat->Add(MsSince(call->start), s);
                             delete call;
                             --*pending;
                           });
}

// The baseline: gRPC health checks (a trivial unary RPC of the same server, channels and TLS,
// without auth or a store) at the same concurrency as the loops below.
void RunHealthChecks(const Fixture& f, LoopResult* out) {
  std::vector<std::unique_ptr<grpc::GenericStub>> generic;
  for (int c = 0; c < f.args.channels; ++c) {
    generic.push_back(std::make_unique<grpc::GenericStub>(
        BenchChannel(f.worker.address, f.worker.tls_ca_file, c)));
  }
  TimedClosedLoop(f.args.in_flight, f.args.seconds, out, [&](int slot, auto done) {
    struct Call {
      grpc::ClientContext context;
      grpc::Slice empty{std::string{}};
      grpc::ByteBuffer req{&empty, 1};
      grpc::ByteBuffer resp;
    };
    auto* call = new Call;
    generic[slot % f.args.channels]->UnaryCall(&call->context, "/grpc.health.v1.Health/Check",
                                               grpc::StubOptions(), &call->req, &call->resp,
                                               [call, done](grpc::Status s) {
                                                 delete call;
                                                 done(s);
                                               });
  });
}

// ReportStep of the job's next steps, each durable before it is acknowledged; then whether
// the ledger counts what was acknowledged, and the store's synced writes meanwhile.
struct ReportResult {
  LoopResult loop;
  std::atomic<int64_t> acked{0};
  int64_t counted = 0;
  uint64_t synced_writes = 0, batches = 0;
};

void RunReportSteps(const Fixture& f, ReportResult* out) {
  std::atomic<int64_t> next_step{0};
  const coordinator::Store::Stats before = f.service->coordinator()->store()->stats();
  TimedClosedLoop(f.args.in_flight, f.args.seconds, &out->loop, [&](int slot, auto done) {
    auto* call = new AsyncCall<proto::ReportStepRequest, proto::ReportStepResponse>;
    f.Prepare(&call->context);
    call->req.set_job_id(f.job);
    call->req.set_incarnation(kIncarnation);
    call->req.set_step(next_step++);
    call->req.set_tokens(128);
    call->req.set_passes(1);
    call->req.add_losses(2.0);
    f.stub(slot)->async()->ReportStep(&call->context, &call->req, &call->resp,
                                      [call, done, out](grpc::Status s) {
                                        if (s.ok() && !call->resp.duplicate()) ++out->acked;
                                        delete call;
                                        done(s);
                                      });
  });
  const coordinator::Store::Stats after = f.service->coordinator()->store()->stats();
  out->synced_writes = after.synced_writes - before.synced_writes;
  out->batches = after.batches - before.batches;
  out->counted = f.jobs->Get(f.job)->ledger().steps();
}

// LeaseBatches of 16 steps already leased (no write).
void RunLeases(const Fixture& f, LoopResult* out) {
  std::atomic<int64_t> lease_from{0};
  TimedClosedLoop(f.args.in_flight, f.args.seconds, out, [&](int slot, auto done) {
    auto* call = new AsyncCall<proto::LeaseBatchesRequest, proto::LeaseBatchesResponse>;
    f.Prepare(&call->context);
    call->req.set_job_id(f.job);
    call->req.set_incarnation(kIncarnation);
    call->req.set_from_step((lease_from += 16) % (kLeased - 16));
    call->req.set_count(16);
    f.stub(slot)->async()->LeaseBatches(&call->context, &call->req, &call->resp,
                                        [call, done](grpc::Status s) {
                                          delete call;
                                          done(s);
                                        });
  });
}

// (job id, worker token) of each of --groups jobs, each with its worker group registered.
using GroupJobs = std::vector<std::pair<std::string, std::string>>;

// Submits --groups jobs of 1,000 steps and registers a worker group for each. nullopt, with a
// line on stderr, when a registration is refused.
std::optional<GroupJobs> StartGroups(Fixture& f) {
  GroupJobs group_jobs;
  proto::JobSpec group_spec = f.spec;  // a small plan each: 1,000 steps
  group_spec.mutable_config()->mutable_budget()->set_amount(128.0 * 1000);
  for (int g = 0; g < f.args.groups; ++g) group_jobs.emplace_back(*f.jobs->Submit(group_spec), "");
  for (auto& [id, token] : group_jobs) token = f.launcher.WaitToken(id);
  for (const auto& [id, token] : group_jobs) {
    const grpc::Status s = RegisterWhenLaunching(f.stubs[0].get(), id, [&](grpc::ClientContext* c) {
      c->AddMetadata("authorization", "Bearer " + token);
    });
    if (!s.ok()) {
      std::fprintf(stderr, "coordinator_bench: register %s: %s\n", id.c_str(),
                   s.error_message().c_str());
      return std::nullopt;
    }
  }
  return group_jobs;
}

// Every group heartbeating every --heartbeat-interval seconds, the beats spread evenly, for
// at least two intervals; and, before that, the CPU of the same service with every group
// registered and no traffic: the floor of the cost.
struct HeartbeatResult {
  Latencies lat;
  double wall = 0, cpu = 0, idle_cpu = 0;
};

void RunHeartbeats(const Fixture& f, const GroupJobs& group_jobs, HeartbeatResult* out) {
  const double idle_cpu = CpuSeconds();
  std::this_thread::sleep_for(std::chrono::duration<double>(f.args.idle_seconds));
  out->idle_cpu = CpuSeconds() - idle_cpu;
  const double interval = f.args.heartbeat_interval;
  std::atomic<int64_t> pending{0};
  const double cpu0 = CpuSeconds();
  out->wall = PacedLoop(interval / f.args.groups, std::max(f.args.seconds, 2 * interval), pending,
                        [&](int64_t i) {
                          const auto& [id, token] = group_jobs[i % f.args.groups];
                          IssueHeartbeat(f.stub(i), id, token, &out->lat, &pending);
                        });
  out->cpu = CpuSeconds() - cpu0;
}

// The groups heartbeating, leasing and reporting: every acknowledged report must be counted
// exactly once, in its own job's ledger.
struct TrafficResult {
  Latencies lat;
  double wall = 0;
  int64_t acked = 0, counted = 0, mismatched_jobs = 0;
};

// What one slot of a group's traffic sends: a heartbeat, and the lease and report of its next
// step; alive until the last of its callbacks.
struct TrafficCall {
  grpc::ClientContext hb_context, lease_context, report_context;
  proto::HeartbeatRequest hb;
  proto::HeartbeatResponse hb_resp;
  proto::LeaseBatchesRequest lease;
  proto::LeaseBatchesResponse lease_resp;
  proto::ReportStepRequest report;
  proto::ReportStepResponse report_resp;
  Clock::time_point start;
};

std::shared_ptr<TrafficCall> MakeTrafficCall(const std::string& job, const std::string& token,
                                             int64_t step) {
  auto call = std::make_shared<TrafficCall>();
  for (grpc::ClientContext* c : {&call->hb_context, &call->lease_context, &call->report_context}) {
    c->AddMetadata("authorization", "Bearer " + token);
  }
  call->hb.set_job_id(job);
  call->hb.set_incarnation(kIncarnation);
  call->lease.set_job_id(job);
  call->lease.set_incarnation(kIncarnation);
  call->lease.set_from_step(step);
  call->lease.set_count(1);
  call->report.set_job_id(job);
  call->report.set_incarnation(kIncarnation);
  call->report.set_step(step);
  call->report.set_tokens(128);
  call->report.set_passes(1);
  call->report.add_losses(2.0);
  return call;
}

// Sends `call`'s heartbeat, and its lease then, once leased, its report. `pending` counts the
// two chains until they end; `acked` counts the report if acknowledged and new.
void IssueTraffic(proto::WorkerService::Stub* stub, std::shared_ptr<TrafficCall> call,
                  Latencies* lat, std::atomic<int64_t>* acked, std::atomic<int64_t>* pending) {
  call->start = Clock::now();
  *pending += 2;
  stub->async()->Heartbeat(&call->hb_context, &call->hb, &call->hb_resp,
                           [call, lat, pending](grpc::Status s) {
                             lat->Add(MsSince(call->start), s);
                             --*pending;
                           });
  stub->async()->LeaseBatches(&call->lease_context, &call->lease, &call->lease_resp,
                              [call, stub, lat, acked, pending](grpc::Status s) {
                                lat->Add(MsSince(call->start), s);
                                if (!s.ok()) {
                                  --*pending;
                                  return;
                                }
                                const Clock::time_point report_start = Clock::now();
                                stub->async()->ReportStep(
                                    &call->report_context, &call->report, &call->report_resp,
                                    [call, report_start, lat, acked, pending](grpc::Status s) {
                                      lat->Add(MsSince(report_start), s);
                                      if (s.ok() && !call->report_resp.duplicate()) ++*acked;
                                      --*pending;
                                    });
                              });
}

void RunGroupsTraffic(const Fixture& f, const GroupJobs& group_jobs, TrafficResult* out) {
  const int groups = f.args.groups;
  std::vector<std::atomic<int64_t>> group_acked(groups);
  std::vector<int64_t> group_next(groups, 0);
  std::atomic<int64_t> pending{0};
  out->wall =
      PacedLoop(f.args.heartbeat_interval / groups, f.args.seconds, pending, [&](int64_t i) {
        const int g = static_cast<int>(i % groups);
        const auto& [id, token] = group_jobs[g];
        IssueTraffic(f.stub(i), MakeTrafficCall(id, token, group_next[g]++), &out->lat,
                     &group_acked[g], &pending);
      });
  std::map<std::string, int64_t> counted_by_job;
  const std::vector<proto::Job> all_jobs = f.jobs->List(/*include_finished=*/true).value();
  for (const proto::Job& j : all_jobs) {
    counted_by_job[j.id()] = j.ledger().steps();
  }
  for (int g = 0; g < groups; ++g) {
    out->acked += group_acked[g].load();
    out->counted += counted_by_job[group_jobs[g].first];
    if (counted_by_job[group_jobs[g].first] != group_acked[g].load()) ++out->mismatched_jobs;
  }
}

// Failure detection: a group that stops heartbeating is relaunched after the timeout. Stops
// the fixture's service and runs one of its own on a store of its own, with a heartbeat
// interval of 0.5 s and a timeout of 2 s.
struct FailureResult {
  double timeout = 0, tick = 0;
  double detect = 0;  // seconds from the last sign of life to the relaunch, less the timeout
};

std::optional<FailureResult> MeasureFailureDetection(Fixture& f) {
  f.service->Stop();
  f.service.reset();
  coordinator::ServiceConfig fc = f.config;
  fc.store_dir = f.args.dir + "/store-failure";
  fc.heartbeat_interval_seconds = 0.5;
  fc.heartbeat_timeout_seconds = 2;
  fc.tick_seconds = 0.5;  // the default
  NullLauncher launcher;
  auto service = coordinator::CoordinatorService::Start(fc, &launcher);
  if (!service.ok()) {
    std::fprintf(stderr, "coordinator_bench: %s\n", service.status().ToString().c_str());
    return std::nullopt;
  }
  ClientOptions o = f.admin;
  o.address = "localhost:" + std::to_string((*service)->port());
  const std::string job = *coordinator::JobClient::Connect(o).value()->Submit(f.spec);
  o.token = launcher.WaitToken(job);
  std::unique_ptr<coordinator::WorkerClient> w;
  for (;;) {
    auto r = coordinator::WorkerClient::Register(o, job, 0, 1);
    if (r.ok()) {
      w = std::move(*r);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const Clock::time_point last_beat = Clock::now();  // the registration; no beat follows
  w.reset();
  const Clock::time_point relaunched = launcher.WaitLaunch(job + "/1");
  FailureResult r;
  r.timeout = fc.heartbeat_timeout_seconds;
  r.tick = fc.tick_seconds;
  r.detect = std::chrono::duration<double>(relaunched - last_beat).count() - r.timeout;
  (*service)->Stop();
  return r;
}

// What the phases measured, in the order they run.
struct Results {
  LoopResult health;
  ReportResult report;
  LoopResult lease;
  HeartbeatResult heartbeats;
  TrafficResult traffic;
  FailureResult failure;
};

// Prints the results as one JSON object (the header of this file says what each part is).
void PrintResults(const Args& a, Results& r) {
  LoopResult &base = r.health, &report = r.report.loop, &lease = r.lease;
  HeartbeatResult& hb = r.heartbeats;
  TrafficResult& traffic = r.traffic;
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
      CpuModel().c_str(), std::thread::hardware_concurrency(), a.in_flight,
      base.lat.ms.size() / base.seconds, Percentile(base.lat.ms, 0.5),
      Percentile(base.lat.ms, 0.99), static_cast<long long>(base.lat.errors),
      1e6 * base.cpu / std::max<size_t>(1, base.lat.ms.size()), a.in_flight, a.channels,
      report.seconds, report.lat.ms.size(), report.lat.ms.size() / report.seconds,
      Percentile(report.lat.ms, 0.5), Percentile(report.lat.ms, 0.99),
      static_cast<long long>(report.lat.errors), static_cast<long long>(r.report.acked.load()),
      static_cast<long long>(r.report.counted),
      static_cast<unsigned long long>(r.report.synced_writes),
      static_cast<double>(r.report.batches) / std::max<uint64_t>(1, r.report.synced_writes),
      1e6 * report.cpu / std::max<size_t>(1, report.lat.ms.size()), a.in_flight, lease.seconds,
      lease.lat.ms.size(), lease.lat.ms.size() / lease.seconds, Percentile(lease.lat.ms, 0.5),
      Percentile(lease.lat.ms, 0.99), static_cast<long long>(lease.lat.errors),
      1e6 * lease.cpu / std::max<size_t>(1, lease.lat.ms.size()), a.groups, a.heartbeat_interval,
      hb.wall, hb.lat.ms.size(), Percentile(hb.lat.ms, 0.5), Percentile(hb.lat.ms, 0.99),
      static_cast<long long>(hb.lat.errors), 100 * hb.cpu / hb.wall,
      100 * hb.idle_cpu / a.idle_seconds, a.groups, traffic.wall, traffic.lat.ms.size(),
      Percentile(traffic.lat.ms, 0.5), Percentile(traffic.lat.ms, 0.99),
      static_cast<long long>(traffic.lat.errors), static_cast<long long>(traffic.acked),
      static_cast<long long>(traffic.counted), static_cast<long long>(traffic.mismatched_jobs),
      r.failure.timeout, r.failure.tick, r.failure.detect);
}

// Runs the phases in order on the fixture's service. False when one cannot go on.
bool RunPhases(Fixture& f, Results* r) {
  if (!RegisterAndLease(f)) return false;
  RunHealthChecks(f, &r->health);
  RunReportSteps(f, &r->report);
  RunLeases(f, &r->lease);
  const std::optional<GroupJobs> group_jobs = StartGroups(f);
  if (!group_jobs) return false;
  RunHeartbeats(f, *group_jobs, &r->heartbeats);
  RunGroupsTraffic(f, *group_jobs, &r->traffic);
  const std::optional<FailureResult> failure = MeasureFailureDetection(f);
  if (!failure) return false;
  r->failure = *failure;
  return true;
}

int Main(int argc, char** argv) {
  Fixture f;
  if (const std::optional<int> exit = ParseArgs(argc, argv, &f.args)) return *exit;
  Results r;
  if (!StartService(&f) || !RunPhases(f, &r)) return 1;
  PrintResults(f.args, r);
  if (r.report.loop.lat.errors > 0) {
    std::fprintf(stderr, "first report error: %s\n", r.report.loop.lat.first_error.c_str());
  }
  std::filesystem::remove_all(f.args.dir);
  return r.report.counted == r.report.acked.load() && r.report.loop.lat.errors == 0 &&
                 r.traffic.mismatched_jobs == 0 && r.traffic.lat.errors == 0
             ? 0
             : 1;
}

}  // namespace
}  // namespace fullband::bench

int main(int argc, char** argv) { return fullband::bench::Main(argc, argv); }

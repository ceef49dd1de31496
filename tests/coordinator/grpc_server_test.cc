// The real coordinator service on loopback over TLS: job and worker flows through the client
// library, authentication and authorization, malformed and oversized requests, health checking.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <random>
#include <sstream>
#include <tuple>
#include <vector>

#include "coordinator/client.h"
#include "coordinator/service.h"
#include "proto/config_convert.h"
#include "proto/coordinator.grpc.pb.h"
#include "tests/common/doc_blocks.h"
#include "tests/coordinator/fakes.h"

namespace fullband::coordinator {
namespace {

const char kAdmin[] = "admin-token-0123456789abcdef0123456789abcdef";
const char kAlice[] = "alice-token-0123456789abcdef0123456789abcdef";
const char kBob[] = "bob-token-0123456789abcdef0123456789abcdef012";

class GrpcServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // gRPC's c-ares resolver leaks a few bytes per lookup of "localhost" (LeakSanitizer);
    // the system resolver does not. Set before gRPC initializes.
    ::setenv("GRPC_DNS_RESOLVER", "native", 1);
    dir_ = std::filesystem::temp_directory_path() /
           ("fullband-grpc-test-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    const std::string d = dir_.string();
    // The setup step users run: a local CA and a server certificate for localhost.
    const std::string cmd =
        std::string(FULLBAND_GEN_CERTS_SCRIPT) + " --dir " + d + "/tls --days 2 > /dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::ofstream(d + "/tokens.yaml") << "version: 1\ntokens:\n"
                                      << "  - {token: " << kAdmin << ", role: admin, user: root}\n"
                                      << "  - {token: " << kAlice << ", role: user, user: alice}\n"
                                      << "  - {token: " << kBob << ", role: user, user: bob}\n";
    std::filesystem::permissions(d + "/tokens.yaml", std::filesystem::perms::owner_read |
                                                         std::filesystem::perms::owner_write);
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(dir_); }

  void SetUp() override {
    const std::string d = dir_.string();
    ServiceConfig config;
    config.listen = "127.0.0.1:0";
    config.store_dir =
        d + "/store-" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    config.tls_cert = d + "/tls/server.crt";
    config.worker_tls_ca = d + "/tls/ca.crt";
    config.tls_key = d + "/tls/server.key";
    config.tokens_file = d + "/tokens.yaml";
    config.tick_seconds = 0.02;
    auto service = CoordinatorService::Start(config, &launcher_, &clock_);
    ASSERT_TRUE(service.ok()) << service.status().ToString();
    service_ = std::move(*service);
  }

  ClientOptions Options(const std::string& token) const {
    ClientOptions o;
    o.address = "localhost:" + std::to_string(service_->port());
    o.token = token;
    o.tls_ca_file = (dir_ / "tls" / "ca.crt").string();
    o.max_attempts = 1;
    o.rpc_timeout_seconds = 10;
    return o;
  }
  std::unique_ptr<JobClient> Jobs(const std::string& token) {
    auto c = JobClient::Connect(Options(token));
    EXPECT_TRUE(c.ok());
    return std::move(*c);
  }
  proto::JobSpec Spec(const std::string& name = "run") {
    proto::JobSpec spec;
    spec.set_name(name);
    *spec.mutable_config() = ToProto(SmallTestConfig());
    return spec;
  }
  // Submits as alice and waits (on the watch stream) until the job is launched; returns the
  // job id and the worker token the launcher was given.
  std::pair<std::string, std::string> SubmitAndLaunch(const std::string& name = "run") {
    auto alice = Jobs(kAlice);
    StatusOr<std::string> id = alice->Submit(Spec(name));
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    const Status watched = alice->Watch(
        *id, [](const proto::Job& job) { return job.state() != proto::JOB_STATE_LAUNCHING; });
    EXPECT_EQ(watched.code(), StatusCode::kCancelled) << watched.ToString();
    for (const LaunchSpec& spec : launcher_.launches()) {
      if (spec.job_id == *id) return {*id, spec.env.at("FULLBAND_WORKER_TOKEN")};
    }
    ADD_FAILURE() << "job " << *id << " was not launched";
    return {*id, ""};
  }

  // A valid request of every unary method (about job `id` with its worker `token`; `other`
  // is a second job, the one to cancel), and whose token sends it.
  using Call = std::tuple<std::string, std::shared_ptr<google::protobuf::Message>, std::string>;
  std::vector<Call> ValidCalls(const std::string& id, const std::string& token,
                               const std::string& other) {
    std::vector<Call> calls;
    const auto add = [&](const std::string& method, auto request, const std::string& who) {
      calls.emplace_back(method, std::make_shared<decltype(request)>(request), who);
    };
    proto::SubmitJobRequest submit;
    *submit.mutable_spec() = Spec("big");
    add("/fullband.proto.JobService/SubmitJob", submit, kAlice);
    proto::GetJobRequest get;
    get.set_job_id(id);
    add("/fullband.proto.JobService/GetJob", get, kAlice);
    proto::GetJobHistoryRequest history;
    history.set_job_id(id);
    add("/fullband.proto.JobService/GetJobHistory", history, kAlice);
    proto::CancelJobRequest cancel;
    cancel.set_job_id(other);
    cancel.set_reason("r");
    add("/fullband.proto.JobService/CancelJob", cancel, kAlice);
    proto::RegisterWorkerGroupRequest reg;
    reg.set_job_id(id);
    reg.set_incarnation(5);
    reg.set_world_size(1);
    reg.set_host("h");
    add("/fullband.proto.WorkerService/RegisterWorkerGroup", reg, token);
    proto::HeartbeatRequest beat;
    beat.set_job_id(id);
    beat.set_incarnation(5);
    add("/fullband.proto.WorkerService/Heartbeat", beat, token);
    proto::LeaseBatchesRequest lease;
    lease.set_job_id(id);
    lease.set_incarnation(5);
    lease.set_count(1);
    add("/fullband.proto.WorkerService/LeaseBatches", lease, token);
    proto::ReportStepRequest report;
    report.set_job_id(id);
    report.set_incarnation(5);
    report.set_tokens(128);
    report.set_passes(1);
    report.add_losses(1.0);
    add("/fullband.proto.WorkerService/ReportStep", report, token);
    proto::CommitCheckpointRequest commit;
    commit.set_job_id(id);
    commit.set_incarnation(5);
    commit.set_step(1);
    commit.set_path("/c");
    commit.set_shards(1);
    add("/fullband.proto.WorkerService/CommitCheckpoint", commit, token);
    proto::RollBackCheckpointRequest rollback;
    rollback.set_job_id(id);
    rollback.set_incarnation(5);
    rollback.set_reason("r");
    add("/fullband.proto.WorkerService/RollBackCheckpoint", rollback, token);
    proto::ReportFailureRequest failure;
    failure.set_job_id(id);
    failure.set_incarnation(5);
    failure.set_reason("r");
    add("/fullband.proto.WorkerService/ReportFailure", failure, token);

    return calls;
  }

  // One raw unary call of `method` with `bytes`, as `token` ("" = none).
  static grpc::Status RawCall(grpc::GenericStub& stub, const std::string& method,
                              const std::string& bytes, const std::string& token) {
    grpc::ClientContext context;
    if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
    grpc::Slice slice(bytes);
    grpc::ByteBuffer in(&slice, 1), out;
    std::promise<grpc::Status> done;
    stub.UnaryCall(&context, method, grpc::StubOptions(), &in, &out,
                   [&](grpc::Status s) { done.set_value(s); });
    return done.get_future().get();
  }

  static std::filesystem::path dir_;
  FakeClock clock_;
  FakeLauncher launcher_;
  std::unique_ptr<CoordinatorService> service_;
};

std::filesystem::path GrpcServerTest::dir_;

TEST_F(GrpcServerTest, WorkerFlowOverTls_CountsReportsOnceAndCompletes) {
  const auto [id, token] = SubmitAndLaunch();
  auto worker = WorkerClient::Register(Options(token), id, 0, 1, /*lease_ahead=*/8);
  ASSERT_TRUE(worker.ok()) << worker.status().ToString();
  EXPECT_EQ((*worker)->registration().total_steps(), 20);
  EXPECT_EQ((*worker)->registration().resume_step(), 0);
  int64_t steps = 0;
  for (;;) {
    auto next = (*worker)->NextStep();
    ASSERT_TRUE(next.ok()) << next.status().ToString();
    if (!next->has_value()) break;
    auto r = (*worker)->Report(**next, {1.5}, 0.01);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_FALSE(r->duplicate());
    if ((*next)->step() == 9) {
      ASSERT_TRUE((*worker)->Commit(10, "/ckpt/step-10", 1).ok());
    }
    ++steps;
    // A repeated report is acknowledged and not counted again.
    if ((*next)->step() == 3) {
      EXPECT_TRUE((*worker)->Report(**next, {1.5}, 0.01)->duplicate());
    }
  }
  EXPECT_EQ(steps, 20);
  StatusOr<proto::Job> job = Jobs(kAlice)->Get(id);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->state(), proto::JOB_STATE_COMPLETED);
  EXPECT_EQ(job->ledger().steps(), 20);
  EXPECT_EQ(job->ledger().tokens(), 20 * 128);
  EXPECT_EQ(job->committed_step(), 10);
  EXPECT_EQ(job->spec().owner(), "alice");
}

TEST_F(GrpcServerTest, Auth_MissingWrongRoleAndOtherUsersJobs_AreRefused) {
  const auto [id, token] = SubmitAndLaunch();
  EXPECT_EQ(Jobs("")->Get(id).status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(Jobs("not-a-known-token-0123456789abcdef0123")->List(false).status().code(),
            StatusCode::kUnauthenticated);
  // A worker token may not use the job service.
  EXPECT_EQ(Jobs(token)->Get(id).status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(Jobs(token)->Submit(Spec()).status().code(), StatusCode::kPermissionDenied);
  // Bob may not see or cancel alice's job, and does not list it; the admin may.
  EXPECT_EQ(Jobs(kBob)->Get(id).status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(Jobs(kBob)->Cancel(id, "").status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(Jobs(kBob)->History(id).status().code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(Jobs(kAlice)->History(id).ok());
  EXPECT_TRUE(Jobs(kBob)->List(true)->empty());
  EXPECT_EQ(Jobs(kAdmin)->List(true)->size(), 1u);
  // A user token may not use the worker service; a worker token only for its own job.
  EXPECT_EQ(WorkerClient::Register(Options(kAlice), id, 0, 1).status().code(),
            StatusCode::kPermissionDenied);
  const auto [other, other_token] = SubmitAndLaunch("other");
  EXPECT_EQ(WorkerClient::Register(Options(token), other, 0, 1).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_TRUE(WorkerClient::Register(Options(other_token), other, 0, 1).ok());
  // The owner cancels.
  StatusOr<proto::Job> cancelled = Jobs(kAlice)->Cancel(id, "");
  ASSERT_TRUE(cancelled.ok());
  EXPECT_EQ(cancelled->state(), proto::JOB_STATE_CANCELLED);
  EXPECT_EQ(cancelled->reason(), "cancelled by alice");
}

TEST_F(GrpcServerTest, MalformedRequests_AreInvalidArgumentNamingTheField) {
  auto alice = Jobs(kAlice);
  StatusOr<std::string> r = alice->Submit(Spec("bad name!"));
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("spec.name"), std::string::npos) << r.status().message();
  proto::JobSpec spec = Spec();
  spec.mutable_config()->mutable_parallel()->set_tp(3);
  r = alice->Submit(spec);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("spec.config.parallel.tp: 3 does not divide"),
            std::string::npos)
      << r.status().message();
  spec = Spec();
  spec.mutable_config()->mutable_schedule()->clear_phases();
  spec.mutable_config()->mutable_schedule()->add_phases()->set_until(1.0);  // no mix
  r = alice->Submit(spec);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("spec.config.schedule.phases[0].mix"), std::string::npos)
      << r.status().message();
  spec = Spec();
  spec.mutable_config()->mutable_budget()->set_kind(static_cast<proto::BudgetKind>(42));
  EXPECT_NE(alice->Submit(spec).status().message().find("budget.kind: unknown enum value 42"),
            std::string::npos);
  EXPECT_EQ(alice->Get("").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(alice->Get("job-999999").status().code(), StatusCode::kNotFound);

  const auto [id, token] = SubmitAndLaunch();
  auto channel = *MakeChannel(Options(token));
  auto stub = proto::WorkerService::NewStub(channel);
  grpc::ClientContext c1;
  c1.AddMetadata("authorization", std::string("Bearer ") + token);
  proto::LeaseBatchesRequest lease;
  lease.set_job_id(id);
  lease.set_incarnation(5);
  lease.set_count(0);
  proto::LeaseBatchesResponse lease_response;
  grpc::Status s = stub->LeaseBatches(&c1, lease, &lease_response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("count"), std::string::npos) << s.error_message();
  grpc::ClientContext c2;
  c2.AddMetadata("authorization", std::string("Bearer ") + token);
  proto::ReportStepRequest report;
  report.set_job_id(id);
  report.set_incarnation(5);
  report.set_tokens(128);
  report.set_passes(2);
  report.add_losses(1.0);
  proto::ReportStepResponse report_response;
  s = stub->ReportStep(&c2, report, &report_response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("losses: 1 values for 2 passes"), std::string::npos);
}

TEST_F(GrpcServerTest, OversizedRequest_IsResourceExhausted) {
  proto::JobSpec spec = Spec();
  spec.set_name(std::string(5 << 20, 'a'));
  EXPECT_EQ(Jobs(kAlice)->Submit(spec).status().code(), StatusCode::kResourceExhausted);
}

// The paths of every string field of `d`, nested messages included (repeated ones through their
// first element).
void StringFields(const google::protobuf::Descriptor* d,
                  std::vector<const google::protobuf::FieldDescriptor*>& path,
                  std::vector<std::vector<const google::protobuf::FieldDescriptor*>>& out) {
  for (int i = 0; i < d->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = d->field(i);
    path.push_back(f);
    if (f->type() == google::protobuf::FieldDescriptor::TYPE_STRING) out.push_back(path);
    if (f->type() == google::protobuf::FieldDescriptor::TYPE_MESSAGE) {
      StringFields(f->message_type(), path, out);
    }
    path.pop_back();
  }
}

// Sets the string at `path` in `m` to `value`.
void SetPath(google::protobuf::Message* m,
             const std::vector<const google::protobuf::FieldDescriptor*>& path,
             const std::string& value) {
  for (size_t i = 0; i < path.size(); ++i) {
    const google::protobuf::FieldDescriptor* f = path[i];
    const google::protobuf::Reflection* r = m->GetReflection();
    if (i + 1 == path.size()) {
      if (f->is_repeated()) {
        r->AddString(m, f, value);
      } else {
        r->SetString(m, f, value);
      }
    } else if (f->is_repeated()) {
      m = r->FieldSize(*m, f) > 0 ? r->MutableRepeatedMessage(m, f, 0) : r->AddMessage(m, f);
    } else {
      m = r->MutableMessage(m, f);
    }
  }
}

TEST_F(GrpcServerTest, OversizeStrings_InEveryField_AreRefusedWithShortMessages) {
  const auto [id, token] = SubmitAndLaunch();
  const std::string other = *Jobs(kAlice)->Submit(Spec("other"));
  const std::vector<Call> calls = ValidCalls(id, token, other);
  auto channel = *MakeChannel(Options(kAlice));
  grpc::GenericStub stub(channel);
  const std::string big(64 << 10, 'x');
  int checked = 0;
  for (const auto& [method, request, who] : calls) {
    std::vector<const google::protobuf::FieldDescriptor*> path;
    std::vector<std::vector<const google::protobuf::FieldDescriptor*>> fields;
    StringFields(request->GetDescriptor(), path, fields);
    for (const auto& field : fields) {
      std::unique_ptr<google::protobuf::Message> spoiled(request->New());
      spoiled->CopyFrom(*request);
      SetPath(spoiled.get(), field, big);
      std::string where = method + " ";
      for (const auto* f : field) where += f->name() + ".";
      const grpc::Status s = RawCall(stub, method, spoiled->SerializeAsString(), who);
      if (where.ends_with(" spec.owner.")) {  // ignored: the server sets the owner (the proto)
        EXPECT_TRUE(s.ok()) << where << ": " << s.error_message().substr(0, 200);
        continue;
      }
      EXPECT_TRUE(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
                  s.error_code() == grpc::StatusCode::PERMISSION_DENIED)
          << where << ": " << s.error_code() << " " << s.error_message().substr(0, 200);
      EXPECT_LE(s.error_message().size(), 1024u) << where;
      ++checked;
    }
  }
  EXPECT_GT(checked, 20);
  // The channel still answers, and nothing but the job with the ignored owner was created,
  // nothing cancelled or counted.
  auto alice = Jobs(kAlice);
  StatusOr<proto::Job> job = alice->Get(id);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->ledger().steps(), 0);
  EXPECT_NE(alice->Get(other)->state(), proto::JOB_STATE_CANCELLED);
  EXPECT_EQ(alice->List(true)->size(), 3u);
}

TEST_F(GrpcServerTest, CancelledJob_WorkerHeartbeatSeesTheStateNotUnauthenticated) {
  const auto [id, token] = SubmitAndLaunch();
  auto worker = WorkerClient::Register(Options(token), id, 0, 1);
  ASSERT_TRUE(worker.ok()) << worker.status().ToString();
  ASSERT_TRUE(Jobs(kAlice)->Cancel(id, "enough").ok());
  auto stub = proto::WorkerService::NewStub(*MakeChannel(Options(token)));
  grpc::ClientContext context;
  context.AddMetadata("authorization", "Bearer " + token);
  proto::HeartbeatRequest request;
  request.set_job_id(id);
  request.set_incarnation(1);
  proto::HeartbeatResponse response;
  const grpc::Status s = stub->Heartbeat(&context, request, &response);
  ASSERT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
  EXPECT_EQ(response.state(), proto::JOB_STATE_CANCELLED);
}

TEST_F(GrpcServerTest, UnparsableRequestBytes_AreInvalidArgumentAndTheChannelStillAnswers) {
  const auto [id, token] = SubmitAndLaunch();
  auto channel = *MakeChannel(Options(kAlice));
  grpc::GenericStub stub(channel);
  // A field tag with wire type 7 (there is none) and truncated varints: no message parses.
  for (const std::string& bytes : {std::string("\x0f\x01", 2), std::string("\x0a\xff", 2),
                                   std::string("\x08\xff\xff\xff", 4)}) {
    for (const char* method :
         {"/fullband.proto.JobService/GetJob", "/fullband.proto.JobService/SubmitJob",
          "/fullband.proto.WorkerService/Heartbeat", "/fullband.proto.WorkerService/ReportStep"}) {
      const grpc::Status s = RawCall(stub, method, bytes, kAlice);
      EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
          << method << ": " << s.error_code() << " " << s.error_message();
    }
  }
  EXPECT_TRUE(Jobs(kAlice)->Get(id).ok());
}

TEST_F(GrpcServerTest, Fuzz_MutatedAndRandomRequests_NeverCrashOrChangeTheLedgerWhenRefused) {
  const auto [id, token] = SubmitAndLaunch();
  const std::string other = *Jobs(kAlice)->Submit(Spec("other"));
  const std::vector<Call> calls = ValidCalls(id, token, other);
  auto channel = *MakeChannel(Options(kAlice));
  grpc::GenericStub stub(channel);
  auto alice = Jobs(kAdmin);
  std::mt19937_64 rng(20261207);
  const std::vector<std::string> tokens = {"", kAlice, kBob, token, "not-a-token", kAdmin};
  int refused = 0;
  for (int i = 0; i < 400; ++i) {
    const auto& [method, request, who] = calls[rng() % calls.size()];
    std::string bytes = request->SerializeAsString();
    switch (rng() % 4) {
      case 0:  // random bytes
        bytes.assign(rng() % 64, '\0');
        for (char& c : bytes) c = static_cast<char>(rng());
        break;
      case 1:  // flipped bytes
        for (int k = 0; k < 3 && !bytes.empty(); ++k)
          bytes[rng() % bytes.size()] ^= 1 << (rng() % 8);
        break;
      case 2:  // truncated
        bytes.resize(bytes.empty() ? 0 : rng() % bytes.size());
        break;
      default:  // a random byte inserted
        bytes.insert(bytes.begin() + (bytes.empty() ? 0 : rng() % bytes.size()),
                     static_cast<char>(rng()));
    }
    const std::string& as = rng() % 2 ? who : tokens[rng() % tokens.size()];
    const proto::Ledger before = alice->Get(id)->ledger();
    const grpc::Status s = RawCall(stub, method, bytes, as);
    ASSERT_NE(s.error_code(), grpc::StatusCode::UNAVAILABLE) << method << ": the server is gone";
    EXPECT_NE(s.error_code(), grpc::StatusCode::INTERNAL) << method << ": " << s.error_message();
    EXPECT_NE(s.error_code(), grpc::StatusCode::UNKNOWN) << method << ": " << s.error_message();
    EXPECT_LE(s.error_message().size(), 1024u);
    if (!s.ok()) {
      ++refused;
      EXPECT_EQ(alice->Get(id)->ledger().SerializeAsString(), before.SerializeAsString())
          << method << " was refused (" << s.error_code() << ") and changed the ledger";
    }
  }
  EXPECT_GT(refused, 300);
  // The server still answers valid requests.
  EXPECT_TRUE(Jobs(kAlice)->Get(id).ok());
  EXPECT_TRUE(Jobs(kAlice)->List(true).ok());
}

TEST_F(GrpcServerTest, PlaintextClient_CannotTalkToTheTlsPort) {
  ClientOptions o = Options(kAlice);
  o.tls_ca_file.clear();
  o.rpc_timeout_seconds = 2;
  EXPECT_EQ((*JobClient::Connect(o))->List(true).status().code(), StatusCode::kUnavailable);
}

TEST_F(GrpcServerTest, HealthCheck_AnswersServing) {
  auto channel = *MakeChannel(Options(""));
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  grpc::Slice empty(std::string{});  // HealthCheckRequest{service: ""} encodes to no bytes
  grpc::ByteBuffer request(&empty, 1);
  grpc::ByteBuffer response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) { done.set_value(s); });
  const grpc::Status s = done.get_future().get();
  ASSERT_TRUE(s.ok()) << s.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));  // status: SERVING
}

TEST_F(GrpcServerTest, Metrics_RenderEveryJob) {
  const auto [id, token] = SubmitAndLaunch();
  const std::string text = service_->RenderMetrics();
  EXPECT_NE(text.find("fullband_job_budget_remaining{job_id=\"" + id + "\",owner=\"alice\"} 2560"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("fullband_job_state{job_id=\"" + id + "\",state=\"LAUNCHING\"} 1"),
            std::string::npos);
  // The exposition is valid for Prometheus' own checker.
  const std::string path = (dir_ / "metrics.txt").string();
  std::ofstream(path) << text;
  EXPECT_EQ(std::system(("promtool check metrics < " + path + " > /dev/null 2>&1").c_str()), 0)
      << text;
}

// Every family /metrics serves is named in a row of the metrics tables of docs/COORDINATOR.md.
TEST_F(GrpcServerTest, Metrics_EveryFamilyIsDocumented) {
  SubmitAndLaunch();
  std::ifstream in(std::string(FULLBAND_SOURCE_DIR) + "/docs/COORDINATOR.md");
  std::string rows;  // the table rows
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("| `")) rows += line + "\n";
  }
  std::istringstream lines(service_->RenderMetrics());
  int families = 0;
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with("# TYPE ")) continue;
    const std::string name = line.substr(7, line.find(' ', 7) - 7);
    ++families;
    EXPECT_NE(rows.find("`" + name + "`"), std::string::npos)
        << name << " is in no table row of docs/COORDINATOR.md";
  }
  EXPECT_GT(families, 20);
}

TEST(ServiceConfig, Keys_AreReadWithDefaultsForTheRest) {
  StatusOr<ServiceConfig> c = ParseServiceConfig(
      "listen: 0.0.0.0:9000\nheartbeat_timeout_seconds: 120\ndirect_single_process: true\n",
      "coordinator.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->listen, "0.0.0.0:9000");
  EXPECT_EQ(c->heartbeat_timeout_seconds, 120);
  EXPECT_TRUE(c->direct_single_process);
  EXPECT_EQ(c->heartbeat_interval_seconds, 10);
  EXPECT_EQ(c->store_dir, "fullband-coordinator");
  EXPECT_TRUE(ParseServiceConfig("", "empty.yaml").ok());
  c = ParseServiceConfig("worker_tls_ca: tls/ca.crt\nworker_env: [SLURM_CONF, MY_VAR]\n", "c.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->worker_tls_ca, "tls/ca.crt");
  EXPECT_EQ(c->worker_env, (std::vector<std::string>{"SLURM_CONF", "MY_VAR"}));
}

TEST(ServiceConfig, DialableHost_ReplacesEveryInterfaceWithThisHostsName) {
  char name[256] = {};
  ASSERT_EQ(::gethostname(name, sizeof(name) - 1), 0);
  EXPECT_EQ(DialableHost("127.0.0.1:7070"), "127.0.0.1");
  EXPECT_EQ(DialableHost("node3:7070"), "node3");
  EXPECT_EQ(DialableHost("0.0.0.0:7070"), name);
  EXPECT_EQ(DialableHost("[::]:7070"), name);
  EXPECT_EQ(DialableHost(":7070"), name);
}

TEST(ServiceConfig, TlsWithoutTheWorkersCa_IsRefusedAtStart) {
  ServiceConfig c;
  c.tls_cert = "server.crt";
  c.tls_key = "server.key";
  const Status s = CoordinatorService::Start(c).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("worker_tls_ca"), std::string::npos) << s.message();
}

TEST(ServiceConfig, BadInput_NamesFileLineAndKey) {
  const auto error = [](const char* yaml) {
    return ParseServiceConfig(yaml, "coordinator.yaml").status().message();
  };
  EXPECT_EQ(error("listen: a\nlisen: b\n"), "coordinator.yaml:2: unknown field lisen");
  EXPECT_EQ(error("tick_seconds: -1\n"), "coordinator.yaml: tick_seconds: -1 must be > 0");
  EXPECT_EQ(error("tick_seconds: soon\n"),
            "coordinator.yaml:1: tick_seconds: expected a number, got 'soon'");
  EXPECT_EQ(error("direct_single_process: yes\n"),
            "coordinator.yaml:1: direct_single_process: expected true or false, got 'yes'");
  EXPECT_EQ(error("store_dir: [a]\n"),
            "coordinator.yaml:1: store_dir: expected a string, got a list");
  EXPECT_NE(error("heartbeat_interval_seconds: 90\n").find("must be below"), std::string::npos);
  EXPECT_EQ(error("worker_env: PATH\n"),
            "coordinator.yaml:1: worker_env: expected a list of strings, got 'PATH'");
  EXPECT_EQ(LoadServiceConfig("/nonexistent/coordinator.yaml").status().code(),
            StatusCode::kNotFound);
}

// The coordinator.yaml block of docs/COORDINATOR.md shows every key with its default.
TEST(ServiceConfig, DocsShowEveryKeyWithItsDefault) {
  const std::vector<std::string> blocks = testing::MarkedYamlBlocks(
      std::string(FULLBAND_SOURCE_DIR) + "/docs/COORDINATOR.md",
      "<!-- coordinator.yaml defaults: tests/coordinator/grpc_server_test.cc -->");
  ASSERT_EQ(blocks.size(), 1u);
  StatusOr<ServiceConfig> shown = ParseServiceConfig(blocks[0], "docs/COORDINATOR.md");
  ASSERT_TRUE(shown.ok()) << shown.status().ToString();
  EXPECT_TRUE(*shown == ServiceConfig{}) << "a value shown is not the default:\n" << blocks[0];
  const YAML::Node keys = YAML::Load(blocks[0]);
  const ServiceConfig defaults;
  VisitFields(defaults, [&](const char* key, const auto&) {
    EXPECT_TRUE(keys[key]) << key << " is not shown in docs/COORDINATOR.md";
  });
}

}  // namespace
}  // namespace fullband::coordinator

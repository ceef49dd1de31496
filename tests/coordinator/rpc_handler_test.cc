// The RPC adapter's validation: every documented field limit of proto/coordinator.proto
// answered with its promised code and a message naming the field, before the job logic runs
// (the job's ledger and state stay as they were). Auth is off here (its rules are
// grpc_server_test's).
#include "coordinator/rpc_handler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "proto/config_convert.h"
#include "tests/common/test_configs.h"
#include "tests/coordinator/fakes.h"

namespace fullband::coordinator {
namespace {

class RpcHandlerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = Store::Open("/rpc-handler-test", /*in_memory=*/true).value();
    CoordinatorOptions options;
    coordinator_ =
        Coordinator::Create(options, &clock_, {{LauncherKind::kLocal, &launcher_}}, store_.get())
            .value();
    handler_ = std::make_unique<RpcHandler>(coordinator_.get(), nullptr);
    proto::SubmitJobRequest submit;
    submit.mutable_spec()->set_name("job");
    *submit.mutable_spec()->mutable_config() = ToProto(SmallTestConfig());
    proto::SubmitJobResponse id;
    ASSERT_TRUE(handler_->SubmitJob("", submit, &id).ok());
    job_ = id.job_id();
    coordinator_->Tick();
    proto::RegisterWorkerGroupRequest reg = Register();
    proto::RegisterWorkerGroupResponse r;
    ASSERT_TRUE(handler_->RegisterWorkerGroup("", reg, &r).ok());
  }

  proto::RegisterWorkerGroupRequest Register() const {
    proto::RegisterWorkerGroupRequest r;
    r.set_job_id(job_);
    r.set_incarnation(7);
    r.set_world_size(1);
    return r;
  }

  // Expects `call` to return `code` with `field` in its message, and nothing counted.
  void Expect(const std::function<Status()>& call, StatusCode code, const std::string& field) {
    const Status s = call();
    EXPECT_EQ(s.code(), code) << field << ": " << s.ToString();
    EXPECT_NE(s.message().find(field), std::string::npos) << s.message();
    EXPECT_EQ(coordinator_->GetJob(job_)->ledger.steps, 0);
    EXPECT_EQ(coordinator_->GetJob(job_)->state, JobState::kRunning);
  }

  FakeClock clock_;
  FakeLauncher launcher_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<RpcHandler> handler_;
  std::string job_;
};

TEST_F(RpcHandlerTest, JobServiceLimits_AreInvalidArgumentOrNotFound) {
  const auto cancel = [&](const std::string& id, const std::string& reason) {
    proto::CancelJobRequest r;
    r.set_job_id(id);
    r.set_reason(reason);
    proto::Job out;
    return handler_->CancelJob("", r, &out);
  };
  Expect([&] { return cancel(job_, std::string(1025, 'r')); }, StatusCode::kInvalidArgument,
         "reason");
  Expect([&] { return cancel("job 1", "x"); }, StatusCode::kInvalidArgument, "job_id");
  Expect([&] { return cancel("job-999999", "x"); }, StatusCode::kNotFound, "job-999999");
  const auto watch = [&](const std::string& id) {
    proto::WatchJobRequest r;
    r.set_job_id(id);
    return handler_->StartWatch("", r);
  };
  Expect([&] { return watch(""); }, StatusCode::kInvalidArgument, "job_id");
  Expect([&] { return watch(std::string(65, 'j')); }, StatusCode::kInvalidArgument, "job_id");
  Expect([&] { return watch("job-999999"); }, StatusCode::kNotFound, "job-999999");
  EXPECT_TRUE(watch(job_).ok());
  proto::SubmitJobRequest submit;
  submit.mutable_spec()->set_name("job");
  *submit.mutable_spec()->mutable_config() = ToProto(SmallTestConfig());
  submit.set_request_id("bad id!");
  proto::SubmitJobResponse id;
  Expect([&] { return handler_->SubmitJob("", submit, &id); }, StatusCode::kInvalidArgument,
         "request_id");
}

TEST_F(RpcHandlerTest, HistoryLimits_NameTheField) {
  const auto history = [&](const std::string& id, int64_t start, int32_t max) {
    proto::GetJobHistoryRequest r;
    r.set_job_id(id);
    r.set_start_step(start);
    r.set_max_steps(max);
    proto::GetJobHistoryResponse out;
    return handler_->GetJobHistory("", r, &out);
  };
  Expect([&] { return history("", 0, 0); }, StatusCode::kInvalidArgument, "job_id");
  Expect([&] { return history("job-999999", 0, 0); }, StatusCode::kNotFound, "job-999999");
  Expect([&] { return history(job_, -1, 0); }, StatusCode::kInvalidArgument, "start_step");
  Expect([&] { return history(job_, 0, -1); }, StatusCode::kInvalidArgument, "max_steps");
  Expect([&] { return history(job_, 0, 10001); }, StatusCode::kInvalidArgument, "max_steps");
  EXPECT_TRUE(history(job_, 0, 10000).ok());
  EXPECT_TRUE(history(job_, 5, 0).ok());
}

TEST_F(RpcHandlerTest, RegisterLimits_NameTheField) {
  proto::RegisterWorkerGroupResponse out;
  const auto reg = [&](const std::function<void(proto::RegisterWorkerGroupRequest&)>& edit) {
    proto::RegisterWorkerGroupRequest r = Register();
    r.set_incarnation(8);
    edit(r);
    return handler_->RegisterWorkerGroup("", r, &out);
  };
  using R = proto::RegisterWorkerGroupRequest;
  Expect([&] { return reg([](R& r) { r.set_incarnation(0); }); }, StatusCode::kInvalidArgument,
         "incarnation");
  Expect([&] { return reg([](R& r) { r.set_attempt(-1); }); }, StatusCode::kInvalidArgument,
         "attempt");
  Expect([&] { return reg([](R& r) { r.set_world_size(0); }); }, StatusCode::kInvalidArgument,
         "world_size");
  Expect([&] { return reg([](R& r) { r.set_world_size(2); }); }, StatusCode::kInvalidArgument,
         "world_size");
  Expect([&] { return reg([](R& r) { r.set_host(std::string(257, 'h')); }); },
         StatusCode::kInvalidArgument, "host");
  Expect([&] { return reg([](R& r) { r.set_attempt(1); }); }, StatusCode::kFailedPrecondition,
         "attempt 1");
}

TEST_F(RpcHandlerTest, LeaseAndReportLimits_NameTheField) {
  proto::LeaseBatchesResponse leased;
  const auto lease = [&](int64_t from, int32_t count) {
    proto::LeaseBatchesRequest r;
    r.set_job_id(job_);
    r.set_incarnation(7);
    r.set_from_step(from);
    r.set_count(count);
    return handler_->LeaseBatches("", r, &leased);
  };
  Expect([&] { return lease(-1, 1); }, StatusCode::kInvalidArgument, "from_step");
  Expect([&] { return lease(0, 0); }, StatusCode::kInvalidArgument, "count");
  Expect([&] { return lease(0, 1025); }, StatusCode::kInvalidArgument, "count");
  ASSERT_TRUE(lease(0, 4).ok());
  proto::ReportStepResponse out;
  const auto report = [&](const std::function<void(proto::ReportStepRequest&)>& edit) {
    proto::ReportStepRequest r;
    r.set_job_id(job_);
    r.set_incarnation(7);
    r.set_step(1);
    r.set_tokens(128);
    r.set_passes(1);
    r.add_losses(2.5);
    edit(r);
    return handler_->ReportStep("", r, &out);
  };
  using P = proto::ReportStepRequest;
  Expect([&] { return report([](P& r) { r.set_step(-1); }); }, StatusCode::kInvalidArgument,
         "step");
  Expect([&] { return report([](P& r) { r.set_tokens(0); }); }, StatusCode::kInvalidArgument,
         "tokens");
  Expect([&] { return report([](P& r) { r.set_tokens(127); }); }, StatusCode::kInvalidArgument,
         "tokens");
  Expect([&] { return report([](P& r) { r.set_passes(0); }); }, StatusCode::kInvalidArgument,
         "passes");
  Expect([&] { return report([](P& r) { r.set_passes(65); }); }, StatusCode::kInvalidArgument,
         "passes");
  Expect([&] { return report([](P& r) { r.add_losses(1.0); }); }, StatusCode::kInvalidArgument,
         "losses");
  Expect([&] { return report([](P& r) { r.set_losses(0, std::nan("")); }); },
         StatusCode::kInvalidArgument, "losses[0]");
  Expect([&] { return report([](P& r) { r.set_step_seconds(-1); }); }, StatusCode::kInvalidArgument,
         "step_seconds");
  Expect([&] { return report([](P& r) { r.set_step(4); }); }, StatusCode::kFailedPrecondition,
         "step 4");
  EXPECT_TRUE(report([](P&) {}).ok());
}

TEST_F(RpcHandlerTest, CheckpointAndFailureLimits_NameTheField) {
  const auto commit = [&](int64_t step, const std::string& path, int64_t shards) {
    proto::CommitCheckpointRequest r;
    r.set_job_id(job_);
    r.set_incarnation(7);
    r.set_step(step);
    r.set_path(path);
    r.set_shards(shards);
    proto::CommitCheckpointResponse out;
    return handler_->CommitCheckpoint("", r, &out);
  };
  Expect([&] { return commit(0, "/c", 1); }, StatusCode::kInvalidArgument, "step");
  Expect([&] { return commit(1, "", 1); }, StatusCode::kInvalidArgument, "path");
  Expect([&] { return commit(1, std::string(4097, 'p'), 1); }, StatusCode::kInvalidArgument,
         "path");
  Expect([&] { return commit(1, "/c", 0); }, StatusCode::kInvalidArgument, "shards");
  Expect([&] { return commit(1, "/c", 1); }, StatusCode::kFailedPrecondition, "counted");
  const auto rollback = [&](int64_t step, const std::string& path, const std::string& reason) {
    proto::RollBackCheckpointRequest r;
    r.set_job_id(job_);
    r.set_incarnation(7);
    r.set_step(step);
    r.set_path(path);
    r.set_reason(reason);
    proto::RollBackCheckpointResponse out;
    return handler_->RollBackCheckpoint("", r, &out);
  };
  Expect([&] { return rollback(-1, "", "x"); }, StatusCode::kInvalidArgument, "step");
  Expect([&] { return rollback(0, "", ""); }, StatusCode::kInvalidArgument, "reason");
  Expect([&] { return rollback(0, std::string(4097, 'p'), "x"); }, StatusCode::kInvalidArgument,
         "path");
  Expect([&] { return rollback(0, "", "x"); }, StatusCode::kFailedPrecondition,
         "not before the committed");
  const auto fail = [&](const std::string& reason) {
    proto::ReportFailureRequest r;
    r.set_job_id(job_);
    r.set_incarnation(7);
    r.set_reason(reason);
    proto::ReportFailureResponse out;
    return handler_->ReportFailure("", r, &out);
  };
  Expect([&] { return fail(""); }, StatusCode::kInvalidArgument, "reason");
  Expect([&] { return fail(std::string(4097, 'r')); }, StatusCode::kInvalidArgument, "reason");
  proto::HeartbeatRequest beat;
  beat.set_job_id(job_);
  proto::HeartbeatResponse out;
  Expect([&] { return handler_->Heartbeat("", beat, &out); }, StatusCode::kInvalidArgument,
         "incarnation");
}

}  // namespace
}  // namespace fullband::coordinator

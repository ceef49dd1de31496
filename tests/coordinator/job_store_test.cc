// JobStore: the coordinator's records as coordinator/FORMAT.md lays them out. Records written
// by hand, field by field and under the documented keys (as the coordinator wrote them before
// JobStore), load; what loads is written back unchanged.
#include "coordinator/job_store.h"

#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include "proto/coordinator_store.pb.h"
#include "tests/proto/fill_every_field.h"

namespace fullband::coordinator {
namespace {

using google::protobuf::util::MessageDifferencer;

std::string StepKey(const std::string& id, int64_t step) {
  std::string key = "step/" + id + "/";
  for (int i = 7; i >= 0; --i) key.push_back(static_cast<char>((step >> (8 * i)) & 0xff));
  return key;
}

class JobStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StatusOr<std::unique_ptr<Store>> store = Store::Open("/job-store-test", /*in_memory=*/true);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
  }
  void Write(WriteSet writes) {
    ASSERT_TRUE(store_->WaitDurable(store_->Append(std::move(writes))).ok());
  }
  std::unique_ptr<Store> store_;
};

TEST(JobStoreFormat, StateRecord_RoundTripsEveryField) {
  testing::ExpectEveryFieldRoundTrips<proto::StoredJobState>(
      [](const proto::StoredJobState& every) {
        JobRecord record;
        const Status read = JobStore::DecodeState(every.SerializeAsString(), record);
        EXPECT_TRUE(read.ok()) << read.ToString();
        proto::StoredJobState back;
        EXPECT_TRUE(back.ParseFromString(JobStore::EncodeState(record)));
        return back;
      });
}

// The bytes the coordinator wrote before JobStore, field by field, for the same values.
TEST(JobStoreFormat, StateRecord_IsTheBytesOfTheHandWrittenRecord) {
  proto::StoredJobState old;
  old.set_state(proto::JOB_STATE_RESTARTING);
  old.set_reason("worker reported: NaN loss");
  old.set_attempt(2);
  old.set_restarts(1);
  old.set_incarnation(77);
  old.set_launch_handle("pid:123");
  old.set_leased_until(40);
  old.set_committed_step(30);
  old.set_checkpoint_path("/c/30");
  old.mutable_ledger()->set_steps(30);
  old.mutable_ledger()->set_tokens(3840);
  (*old.mutable_ledger()->mutable_pass_histogram())[2] = 30;
  old.mutable_ledger()->add_last_losses(2.5);
  old.set_restart_at_unix(1000.5);
  old.set_updated_unix(990.25);
  old.set_wall_start_unix(900);
  old.set_worker_token_digest("ab12");

  JobRecord record;
  ASSERT_TRUE(JobStore::DecodeState(old.SerializeAsString(), record).ok());
  EXPECT_EQ(record.state, JobState::kRestarting);
  EXPECT_EQ(record.reason, "worker reported: NaN loss");
  EXPECT_EQ(record.attempt, 2);
  EXPECT_EQ(record.restarts, 1);
  EXPECT_EQ(record.incarnation, 77u);
  EXPECT_EQ(record.launch_handle, "pid:123");
  EXPECT_EQ(record.leased_until, 40);
  EXPECT_EQ(record.committed_step, 30);
  EXPECT_EQ(record.checkpoint_path, "/c/30");
  EXPECT_EQ(record.ledger.tokens, 3840);
  EXPECT_EQ(record.ledger.pass_histogram, (std::map<int64_t, int64_t>{{2, 30}}));
  EXPECT_EQ(record.restart_at_unix, 1000.5);
  EXPECT_EQ(record.updated_unix, 990.25);
  EXPECT_EQ(record.wall_start_unix, 900);
  EXPECT_EQ(record.worker_token_digest, "ab12");
  EXPECT_EQ(JobStore::EncodeState(record), old.SerializeAsString());
}

TEST(JobStoreFormat, StateRecordWithoutAState_IsDataLoss) {
  proto::StoredJobState unspecified;
  unspecified.set_attempt(1);
  JobRecord record;
  EXPECT_EQ(JobStore::DecodeState(unspecified.SerializeAsString(), record).code(),
            StatusCode::kDataLoss);
  EXPECT_EQ(JobStore::DecodeState("\xff\xff", record).code(), StatusCode::kDataLoss);
}

// Every field of the three records of a job, written under coordinator/FORMAT.md's keys, loads; written
// back by JobStore, each record is what was stored.
TEST_F(JobStoreTest, HandWrittenJob_LoadsAndIsWrittenBackUnchanged) {
  int counter = 0;
  proto::StoredJobSpec spec;
  proto::StoredJobState state;
  proto::StoredStep before, after;  // one before the committed step, one after
  testing::FillEveryField(&spec, counter);
  testing::FillEveryField(&state, counter);
  testing::FillEveryField(&before, counter);
  testing::FillEveryField(&after, counter);
  state.set_committed_step(5);
  after.set_passes(3);
  const std::string id = "job-000042";
  WriteSet writes;
  writes.puts = {{"job/" + id + "/spec", spec.SerializeAsString()},
                 {"job/" + id + "/state", state.SerializeAsString()},
                 {StepKey(id, 4), before.SerializeAsString()},
                 {StepKey(id, 6), after.SerializeAsString()}};
  Write(std::move(writes));

  StatusOr<std::vector<LoadedJob>> loaded = JobStore(store_.get()).Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  ASSERT_EQ(loaded->size(), 1u);
  const LoadedJob& job = (*loaded)[0];
  EXPECT_EQ(job.id, id);
  EXPECT_EQ(job.submitted.spec.name, spec.spec().name());
  EXPECT_EQ(job.submitted.request_id, spec.request_id());
  EXPECT_EQ(job.record.committed_step, 5);
  EXPECT_EQ(job.counted, (std::map<int64_t, int64_t>{{6, 3}}));  // step 4 is before step 5

  WriteSet back;
  JobStore::PutSpec(id, job.submitted, back);
  JobStore::PutState(id, job.record, back);
  ASSERT_EQ(back.puts.size(), 2u);
  EXPECT_EQ(back.puts[0].first, "job/" + id + "/spec");
  EXPECT_EQ(back.puts[1].first, "job/" + id + "/state");
  proto::StoredJobSpec spec_back;
  proto::StoredJobState state_back;
  ASSERT_TRUE(spec_back.ParseFromString(back.puts[0].second));
  ASSERT_TRUE(state_back.ParseFromString(back.puts[1].second));
  EXPECT_TRUE(MessageDifferencer::Equals(spec, spec_back));
  EXPECT_TRUE(MessageDifferencer::Equals(state, state_back));
}

TEST_F(JobStoreTest, History_ReadsStepRecordsWrittenUnderTheirKeys) {
  const std::string id = "job-000001";
  WriteSet writes;
  for (int64_t step : {0, 1, 2, 300}) {
    JobStore::PutStep(id, step, {2, 128, {2.5, 2.25}, 0.5, 9, 1000.0 + step, 1}, writes);
  }
  JobStore::PutStep("job-000002", 3, {}, writes);  // another job's: not in the page
  ASSERT_EQ(writes.puts[3].first, StepKey(id, 300));
  proto::StoredStep stored;
  ASSERT_TRUE(stored.ParseFromString(writes.puts[3].second));
  EXPECT_EQ(stored.unix_time(), 1300);
  EXPECT_EQ(stored.incarnation(), 9u);
  Write(std::move(writes));

  StatusOr<HistoryPage> page = JobStore(store_.get()).History(id, 1, 2);
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  ASSERT_EQ(page->steps.size(), 2u);
  EXPECT_EQ(page->steps[0].first, 1);
  EXPECT_EQ(page->steps[1].first, 2);
  EXPECT_EQ(page->steps[1].second.losses, (std::vector<double>{2.5, 2.25}));
  EXPECT_EQ(page->steps[1].second.attempt, 1);
  EXPECT_EQ(page->next_start_step, 300);
  StatusOr<HistoryPage> last = JobStore(store_.get()).History(id, 3, 10);
  ASSERT_TRUE(last.ok());
  ASSERT_EQ(last->steps.size(), 1u);
  EXPECT_EQ(last->steps[0].first, 300);
  EXPECT_EQ(last->next_start_step, -1);
}

TEST_F(JobStoreTest, DeleteCheckpointsAfter_DeletesOnlyLaterOnesOfTheJob) {
  WriteSet writes;
  for (int64_t step : {2, 5, 9}) JobStore::PutCheckpoint("job-000001", step, {"/c"}, writes);
  JobStore::PutCheckpoint("job-000002", 9, {"/c"}, writes);
  const std::string later = writes.puts[2].first;
  Write(std::move(writes));
  WriteSet deletes;
  ASSERT_TRUE(JobStore(store_.get()).DeleteCheckpointsAfter("job-000001", 5, deletes).ok());
  EXPECT_EQ(deletes.deletes, std::vector<std::string>{later});
}

}  // namespace
}  // namespace fullband::coordinator

// Durable writes (common/file_util.h) against a power loss after every file-system operation
// (FaultFileSystem): a file keeps its old content or has its new one, whole, and has the new one
// whenever the write returned OK; a full disk is an INTERNAL error naming the path.
#include "common/file_util.h"

#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/listener.h>
#include <rocksdb/options.h>

#include <atomic>
#include <filesystem>

#include "tests/common/fault_file_system.h"
#include "tests/common/temp_dir.h"

namespace fullband {
namespace {

class FileUtilTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::MakeTempDir("fullband_file_util_"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string dir_;
  std::shared_ptr<testing::FaultFileSystem> faults_ = std::make_shared<testing::FaultFileSystem>();
};

TEST_F(FileUtilTest, WriteFileDurably_PowerLossAtEveryOperation_LeavesOldOrNewContent) {
  const std::string path = dir_ + "/sub/dir/state.json";
  const std::string old_content(5000, 'o'), new_content(7000, 'n');
  int64_t crash_points = 0;
  for (int64_t n = 0;; ++n) {
    std::filesystem::remove_all(dir_ + "/sub");
    faults_->ResumeWrites();
    ASSERT_TRUE(CreateDirectoriesDurably(ParentDirectory(path), faults_.get()).ok());
    ASSERT_TRUE(WriteFileDurably(path, old_content, faults_.get()).ok());
    const int64_t before = faults_->operations();
    faults_->FailAfter(n);
    const bool written = WriteFileDurably(path, new_content, faults_.get()).ok();
    const int64_t used = faults_->operations() - before;
    faults_->DropUnsynced();
    faults_->ResumeWrites();
    StatusOr<std::string> got = ReadFileToString(path);
    ASSERT_TRUE(got.ok()) << "crash after " << n << " operations: " << got.status().ToString();
    // Not OK: the write may or may not have reached the disk, but whole if it did.
    if (written) {
      EXPECT_EQ(*got, new_content) << "crash after " << n << " operations";
    } else {
      EXPECT_TRUE(*got == old_content || *got == new_content) << "crash after " << n;
    }
    // No temporary file is left beside it.
    EXPECT_EQ(std::distance(std::filesystem::directory_iterator(ParentDirectory(path)),
                            std::filesystem::directory_iterator()),
              1);
    if (written && used < n) break;
    ++crash_points;
  }
  EXPECT_GE(crash_points, 4);  // create, append, sync, rename, directory sync
}

TEST_F(FileUtilTest, FullDisk_IsInternalNamingThePath) {
  faults_->StopWrites();
  Status s = WriteFileDurably(dir_ + "/a.json", "{}", faults_.get());
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_NE(s.message().find(dir_ + "/a.json"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("no space"), std::string::npos) << s.message();
  s = CreateDirectoriesDurably(dir_ + "/x/y", faults_.get());
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_NE(s.message().find(dir_ + "/x"), std::string::npos) << s.message();
  faults_->ResumeWrites();
  EXPECT_EQ(ReadFileToString(dir_ + "/a.json").status().code(), StatusCode::kNotFound);
}

// Counts the background errors RocksDB reports and the recoveries it offers to start.
class RecoveryWatcher final : public rocksdb::EventListener {
 public:
  void OnBackgroundError(rocksdb::BackgroundErrorReason, rocksdb::Status* status) override {
    status->PermitUncheckedError();
    ++errors;
  }
  void OnErrorRecoveryBegin(rocksdb::BackgroundErrorReason, rocksdb::Status status,
                            bool* auto_recovery) override {
    status.PermitUncheckedError();
    if (*auto_recovery) ++offered;
  }
  std::atomic<int> errors{0}, offered{0};
};

// Note [No background recovery]: RocksDB offers to recover from a full disk on its own; the
// option turns that down (a watcher before it sees the offer, one after it does not), and the
// database stays stopped, even once there is room again, until it is reopened.
TEST_F(FileUtilTest, DisableBackgroundRecovery_AFullDiskStopsTheDatabaseUntilReopened) {
  const auto before = std::make_shared<RecoveryWatcher>();
  const auto after = std::make_shared<RecoveryWatcher>();
  const std::unique_ptr<rocksdb::Env> env = rocksdb::NewCompositeEnv(faults_);
  rocksdb::Options options;
  options.create_if_missing = true;
  options.env = env.get();
  options.listeners.push_back(before);
  DisableBackgroundRecovery(&options);
  options.listeners.push_back(after);
  rocksdb::DB* raw = nullptr;
  ASSERT_TRUE(rocksdb::DB::Open(options, dir_ + "/db", &raw).ok());
  std::unique_ptr<rocksdb::DB> db(raw);
  rocksdb::WriteOptions sync;
  sync.sync = true;
  ASSERT_TRUE(db->Put(sync, "a", "1").ok());

  faults_->StopWrites();
  const rocksdb::Status full = db->Put(sync, "b", "2");
  EXPECT_TRUE(full.IsIOError() && full.subcode() == rocksdb::Status::kNoSpace) << full.ToString();
  faults_->ResumeWrites();
  EXPECT_GE(after->errors, 1);
  EXPECT_GE(before->offered, 1);  // RocksDB would have recovered on its own
  EXPECT_EQ(after->offered, 0);
  EXPECT_FALSE(db->Put(sync, "c", "3").ok());  // stopped, though there is room now

  db->Close().PermitUncheckedError();  // reports the error it stopped on
  db.reset();
  ASSERT_TRUE(rocksdb::DB::Open(options, dir_ + "/db", &raw).ok());
  db.reset(raw);
  std::string value;
  ASSERT_TRUE(db->Get(rocksdb::ReadOptions(), "a", &value).ok());
  EXPECT_EQ(value, "1");
  EXPECT_TRUE(db->Put(sync, "c", "3").ok());
}

}  // namespace
}  // namespace fullband

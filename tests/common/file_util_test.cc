// Durable writes (common/file_util.h) against a power loss after every file-system operation
// (FaultFileSystem): a file keeps its old content or has its new one, whole, and has the new one
// whenever the write returned OK; a full disk is an INTERNAL error naming the path.
#include "common/file_util.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace fullband

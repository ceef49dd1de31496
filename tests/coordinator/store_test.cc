// Store: the meta record, scans, group commit and durability order, reopening.
#include "coordinator/store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <thread>

namespace fullband::coordinator {
namespace {

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = std::filesystem::temp_directory_path() /
            ("fullband-store-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(path_);
  }
  void TearDown() override { std::filesystem::remove_all(path_); }
  std::filesystem::path path_;
};

TEST_F(StoreTest, Appended_IsReadBackAfterReopen) {
  {
    auto store = Store::Open(path_.string());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    WriteSet w;
    w.puts = {{"job/a", "1"}, {"job/b", "2"}, {"other", "3"}};
    const uint64_t seq = (*store)->Append(w);
    EXPECT_EQ(seq, 1u);
    WriteSet d;
    d.deletes = {"job/b"};
    ASSERT_TRUE((*store)->WaitDurable((*store)->Append(d)).ok());
  }
  auto store = Store::Open(path_.string());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  std::vector<std::string> seen;
  ASSERT_TRUE((*store)
                  ->Scan("job/",
                         [&](std::string_view k, std::string_view v) {
                           seen.push_back(std::string(k) + "=" + std::string(v));
                           return OkStatus();
                         })
                  .ok());
  EXPECT_EQ(seen, std::vector<std::string>{"job/a=1"});
}

TEST_F(StoreTest, ConcurrentAppends_AreGroupCommittedAndAllDurable) {
  auto store = Store::Open(path_.string());
  ASSERT_TRUE(store.ok());
  Store* s = store->get();
  constexpr int kThreads = 8, kEach = 200;
  std::atomic<int> acknowledged{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        WriteSet w;
        w.puts.emplace_back("k/" + std::to_string(t) + "/" + std::to_string(i), "v");
        if (s->WaitDurable(s->Append(std::move(w))).ok()) ++acknowledged;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(acknowledged.load(), kThreads * kEach);
  const Store::Stats stats = s->stats();
  EXPECT_EQ(stats.batches, static_cast<uint64_t>(kThreads * kEach));
  EXPECT_LT(stats.synced_writes, stats.batches);  // several batches per synced write
  int count = 0;
  ASSERT_TRUE(s->Scan("k/", [&](auto, auto) {
                 ++count;
                 return OkStatus();
               }).ok());
  EXPECT_EQ(count, kThreads * kEach);
}

TEST_F(StoreTest, WhenDurable_OfAnOldSequence_AnswersInline) {
  auto store = Store::Open("/mem", /*in_memory=*/true);
  ASSERT_TRUE(store.ok());
  WriteSet w;
  w.puts = {{"a", "b"}};
  const uint64_t seq = (*store)->Append(w);
  ASSERT_TRUE((*store)->WaitDurable(seq).ok());
  bool called = false;
  (*store)->WhenDurable(seq, [&](const Status& s) { called = s.ok(); });
  EXPECT_TRUE(called);
  EXPECT_EQ((*store)->Append(WriteSet{}), seq);  // empty: no new number
}

TEST_F(StoreTest, ForeignMetaRecord_IsDataLoss) {
  {
    auto store = Store::Open(path_.string());
    ASSERT_TRUE(store.ok());
    WriteSet w;
    w.puts = {{"meta", "not a meta record"}};
    ASSERT_TRUE((*store)->WaitDurable((*store)->Append(w)).ok());
  }
  auto store = Store::Open(path_.string());
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kDataLoss);
}

TEST_F(StoreTest, UnopenableDirectory_IsInternal) {
  auto store = Store::Open("/proc/fullband-cannot-create/db");
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kInternal);
}

}  // namespace
}  // namespace fullband::coordinator

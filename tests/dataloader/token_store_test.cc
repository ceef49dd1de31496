// Token store: round trips, commits that survive a crashed writer, and corrupt, truncated or
// missing records reported by index — never returned as tokens.
#include "dataloader/token_store.h"

#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>

#include "tests/common/fault_file_system.h"
#include "tests/dataloader/raw_store.h"

namespace fullband::dataloader {
namespace {

constexpr int64_t kSeqLen = 7;  // records of 8 tokens
constexpr int64_t kVocab = 1000;

TokenStoreWriter::Identity Ident(int64_t seq_len = kSeqLen) {
  return {"test", "abc123", kVocab, seq_len};
}

class TokenStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/fullband_store_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/store";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Records r = 0..n−1 with token i of record r = (r · 8 + i) % kVocab.
  static std::vector<uint32_t> Records(int64_t first, int64_t n) {
    std::vector<uint32_t> t(static_cast<size_t>(n * (kSeqLen + 1)));
    for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<uint32_t>((first * 8 + i) % kVocab);
    return t;
  }
  static StoreSource Source(const std::string& name, int64_t tokens, int64_t docs = 1) {
    return StoreSource{name, 100, name + "-hash", docs, tokens, 0};
  }

  // Writes n records and a tail of 3 tokens as one committed source.
  void WriteStore(int64_t n) {
    auto w = TokenStoreWriter::Open(path_, Ident(), "{}");
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    ASSERT_TRUE((*w)->Append(Records(0, n)).ok());
    ASSERT_TRUE((*w)->Commit({1, 2, 3}, {Source("a", n * (kSeqLen + 1) + 3)}).ok());
    ASSERT_TRUE((*w)->Close().ok());
  }

  void WithRawDb(const std::function<void(rocksdb::DB*,
                                          const std::vector<rocksdb::ColumnFamilyHandle*>&)>& fn) {
    testing::WithRawDb(path_, fn);
  }
  void Tamper(int64_t index, const std::function<void(std::string*)>& edit) {
    testing::TamperRecord(path_, index, edit);
  }

  // Table files an ingest writes before adding them to the store.
  int TableFiles() const {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator(path_)) {
      n += e.path().filename().string().starts_with("fullband-ingest-");
    }
    return n;
  }

  std::string dir_, path_;
};

TEST_F(TokenStoreTest, WrittenRecords_ReadBackExactly) {
  WriteStore(20);
  auto store = RocksDbTokenStore::Open(path_);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ((*store)->num_sequences(), 20);
  EXPECT_EQ((*store)->seq_len(), kSeqLen);
  EXPECT_EQ((*store)->metadata().num_tokens, 20 * 8 + 3);
  EXPECT_EQ((*store)->metadata().tail, (std::vector<uint32_t>{1, 2, 3}));
  EXPECT_TRUE((*store)->unfinished_ingest().empty());
  const std::vector<int64_t> indices = {19, 0, 7, 7};
  std::vector<uint32_t> out(indices.size() * 8);
  ASSERT_TRUE((*store)->Read(indices, out.data()).ok());
  for (size_t k = 0; k < indices.size(); ++k) {
    const std::vector<uint32_t> want = Records(indices[k], 1);
    EXPECT_TRUE(std::equal(want.begin(), want.end(), out.begin() + k * 8)) << "record " << k;
  }
  auto report = (*store)->Verify(nullptr);
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->records, 20);
  EXPECT_EQ(report->bad_records, 0);
}

TEST_F(TokenStoreTest, IndexPastTheEnd_IsOutOfRange) {
  WriteStore(5);
  auto store = RocksDbTokenStore::Open(path_);
  std::vector<uint32_t> out(8);
  const int64_t index = 5;
  EXPECT_EQ((*store)->Read({&index, 1}, out.data()).code(), StatusCode::kOutOfRange);
}

TEST_F(TokenStoreTest, TwoReaders_OpenOneStoreAtOnce_AlsoWhileAWriterAppends) {
  WriteStore(4);
  auto a = RocksDbTokenStore::Open(path_);
  auto b = RocksDbTokenStore::Open(path_);
  ASSERT_TRUE(a.ok() && b.ok());
  auto w = TokenStoreWriter::Open(path_, Ident(), "{}");
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  auto c = RocksDbTokenStore::Open(path_);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ((*c)->num_sequences(), 4);
  EXPECT_FALSE((*c)->unfinished_ingest().empty());  // the writer is still open
}

TEST_F(TokenStoreTest, ManyReaderProcesses_ReadOneStoreAtOnce) {
  WriteStore(200);
  std::vector<pid_t> children;
  for (int c = 0; c < 4; ++c) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto store = RocksDbTokenStore::Open(path_);
      if (!store.ok()) _exit(10);
      std::vector<uint32_t> out(8);
      for (int pass = 0; pass < 20; ++pass) {
        for (int64_t i = 0; i < 200; ++i) {
          if (!(*store)->Read({&i, 1}, out.data()).ok()) _exit(11);
          if (out != Records(i, 1)) _exit(12);
        }
      }
      _exit(0);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "reader exit " << status;
  }
}

TEST_F(TokenStoreTest, SecondWriter_IsRefused) {
  WriteStore(1);
  auto first = TokenStoreWriter::Open(path_, Ident(), "{}");
  ASSERT_TRUE(first.ok());
  auto second = TokenStoreWriter::Open(path_, Ident(), "{}");
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable) << second.status().ToString();
  EXPECT_NE(second.status().message().find(path_), std::string::npos);
}

TEST_F(TokenStoreTest, IdOutsideTheVocabularyWithAValidChecksum_IsDataLoss) {
  WriteStore(10);
  // A record whose checksum is right but whose ids are not: written by another tokenizer, or
  // damaged before it was summed.
  Tamper(5, [](std::string* v) {
    const uint32_t big = 1u << 30;
    std::memcpy(v->data() + 4, &big, 4);
    const size_t ids = v->size() - 8;
    const uint64_t sum = XXH3_64bits_withSeed(v->data(), ids, 5);
    std::memcpy(v->data() + ids, &sum, 8);
  });
  auto store = RocksDbTokenStore::Open(path_);
  ASSERT_TRUE(store.ok());
  std::vector<uint32_t> out(8);
  const int64_t index = 5;
  const Status s = (*store)->Read({&index, 1}, out.data());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("sequence 5: id 1073741824 >= vocab_size"), std::string::npos)
      << s.ToString();
}

TEST_F(TokenStoreTest, StoreWithoutItsMetadataRecord_IsDataLoss) {
  WriteStore(3);
  WithRawDb([](rocksdb::DB* db, const std::vector<rocksdb::ColumnFamilyHandle*>& handles) {
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions(), handles[2]));
    std::vector<std::string> keys;
    for (it->SeekToFirst(); it->Valid(); it->Next()) keys.push_back(it->key().ToString());
    for (const std::string& k : keys)
      ASSERT_TRUE(db->Delete(rocksdb::WriteOptions(), handles[2], k).ok());
  });
  const Status s = RocksDbTokenStore::Open(path_).status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  EXPECT_NE(s.message().find("metadata record is missing"), std::string::npos) << s.ToString();
}

TEST_F(TokenStoreTest, CorruptRecord_IsDataLossNamingTheIndex) {
  WriteStore(10);
  Tamper(3, [](std::string* v) { (*v)[5] ^= 1; });
  auto store = RocksDbTokenStore::Open(path_);
  ASSERT_TRUE(store.ok());
  std::vector<uint32_t> out(8);
  const int64_t index = 3;
  const Status s = (*store)->Read({&index, 1}, out.data());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find(path_ + ": sequence 3: checksum mismatch"), std::string::npos)
      << s.ToString();
  auto report = (*store)->Verify(nullptr);
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->bad_records, 1);
  ASSERT_EQ(report->problems.size(), 1u);
  EXPECT_NE(report->problems[0].find("sequence 3"), std::string::npos);
}

TEST_F(TokenStoreTest, RandomDamage_IsAlwaysDataLoss_NeverTokens) {
  WriteStore(30);
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 10; ++trial) {
    const int64_t index = static_cast<int64_t>(rng() % 30);
    const uint64_t what = rng();
    Tamper(index, [&](std::string* v) {
      if (what % 3 == 0) {
        v->resize(rng() % v->size());  // truncated
      } else {
        (*v)[rng() % v->size()] ^= static_cast<char>(1 + rng() % 255);  // a flipped byte
      }
    });
    auto store = RocksDbTokenStore::Open(path_);
    ASSERT_TRUE(store.ok());
    std::vector<uint32_t> out(8);
    EXPECT_EQ((*store)->Read({&index, 1}, out.data()).code(), StatusCode::kDataLoss)
        << "trial " << trial << " record " << index;
    store->reset();
    Tamper(index, [&](std::string* v) {  // repair it for the next trial
      const std::vector<uint32_t> good = Records(index, 1);
      v->assign(reinterpret_cast<const char*>(good.data()), good.size() * 4);
      const uint64_t sum = XXH3_64bits_withSeed(v->data(), v->size(), static_cast<uint64_t>(index));
      v->append(reinterpret_cast<const char*>(&sum), 8);
    });
  }
  auto store = RocksDbTokenStore::Open(path_);
  EXPECT_EQ((*store)->Verify(nullptr)->bad_records, 0);
}

TEST_F(TokenStoreTest, TruncatedRecord_IsDataLoss) {
  WriteStore(10);
  Tamper(6, [](std::string* v) { v->resize(v->size() - 4); });
  auto store = RocksDbTokenStore::Open(path_);
  std::vector<uint32_t> out(8);
  const int64_t index = 6;
  const Status s = (*store)->Read({&index, 1}, out.data());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("sequence 6: record of 36 bytes, expected 40"), std::string::npos)
      << s.ToString();
}

TEST_F(TokenStoreTest, MissingRecord_IsDataLossInReadAndVerify) {
  WriteStore(10);
  Tamper(8, nullptr);
  auto store = RocksDbTokenStore::Open(path_);
  std::vector<uint32_t> out(8);
  const int64_t index = 8;
  EXPECT_EQ((*store)->Read({&index, 1}, out.data()).code(), StatusCode::kDataLoss);
  auto report = (*store)->Verify(nullptr);
  EXPECT_EQ(report->bad_records, 1);
  EXPECT_EQ(report->records, 9);
}

TEST_F(TokenStoreTest, RecordAtTheWrongIndex_FailsItsChecksum) {
  WriteStore(10);
  std::string moved;
  Tamper(2, [&](std::string* v) { moved = *v; });
  Tamper(4, [&](std::string* v) { *v = moved; });
  auto store = RocksDbTokenStore::Open(path_);
  std::vector<uint32_t> out(8);
  const int64_t index = 4;
  EXPECT_EQ((*store)->Read({&index, 1}, out.data()).code(), StatusCode::kDataLoss);
}

TEST_F(TokenStoreTest, CrashedIngest_OpensAsThePreviousCommitAndIsReportedUnfinished) {
  WriteStore(5);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // An ingest that appends and dies before committing.
    auto w = TokenStoreWriter::Open(path_, Ident(), R"({"inputs": ["big.jsonl"]})");
    if (!w.ok()) _exit(1);
    if (!(*w)->Append(Records(5, 3)).ok()) _exit(2);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);

  auto store = RocksDbTokenStore::Open(path_);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ((*store)->num_sequences(), 5);
  EXPECT_NE((*store)->unfinished_ingest().find("big.jsonl"), std::string::npos);
  auto report = (*store)->Verify(nullptr);
  EXPECT_EQ(report->bad_records, 0);
  EXPECT_EQ(report->extra_records, 0);  // the appended records never reached the store
  store->reset();
  EXPECT_EQ(TableFiles(), 1);  // the table being written when the ingest died

  // The next ingest drops the leftovers and continues from the committed count.
  auto w = TokenStoreWriter::Open(path_, Ident(), "{}");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(TableFiles(), 0);
  ASSERT_TRUE((*w)->Append(Records(5, 2)).ok());
  ASSERT_TRUE((*w)->Commit({}, {Source("b", 2 * 8 - 3)}).ok());
  ASSERT_TRUE((*w)->Close().ok());
  w->reset();
  auto after = RocksDbTokenStore::Open(path_);
  EXPECT_EQ((*after)->num_sequences(), 7);
  EXPECT_TRUE((*after)->unfinished_ingest().empty());
  auto clean = (*after)->Verify(nullptr);
  EXPECT_EQ(clean->extra_records, 0);
  EXPECT_EQ(clean->bad_records, 0);
}

// A power loss (FaultFileSystem) after every file-system operation of an ingest in turn — opening
// the store, appending, committing, closing — into a store that does not exist yet and then into
// one that holds a commit: the store opens as of a whole commit, the new one whenever Commit
// returned OK, every record reads back exactly, and the next ingest goes on from it.
TEST_F(TokenStoreTest, PowerLossAtEveryOperation_LeavesTheLastCommitWhole) {
  const auto faults = std::make_shared<fullband::testing::FaultFileSystem>();
  const auto ingest = [&](int64_t first, int64_t n, const std::string& name) {
    auto w = TokenStoreWriter::Open(path_, Ident(), "{}", faults);
    if (!w.ok()) return false;
    const bool ok = (*w)->Append(Records(first, n)).ok() &&
                    (*w)->Commit({}, {Source(name, n * (kSeqLen + 1))}).ok();
    (*w)->Close().IgnoreError();
    return ok;
  };
  // `records` read back exactly; an unfinished ingest may leave records past them, which the
  // reader ignores and the next ingest drops (`settled`: none are left).
  const auto expect_store = [&](int64_t records, bool settled, const std::string& when) {
    auto store = RocksDbTokenStore::Open(path_);
    ASSERT_TRUE(store.ok()) << when << ": " << store.status().ToString();
    ASSERT_EQ((*store)->num_sequences(), records) << when;
    std::vector<int64_t> all(static_cast<size_t>(records));
    std::iota(all.begin(), all.end(), 0);
    std::vector<uint32_t> got(all.size() * (kSeqLen + 1));
    ASSERT_TRUE((*store)->Read(all, got.data()).ok()) << when;
    EXPECT_EQ(got, Records(0, records)) << when;
    auto report = (*store)->Verify([](int64_t, int64_t) {});
    ASSERT_TRUE(report.ok()) << when;
    EXPECT_EQ(report->bad_records, 0) << when;
    EXPECT_TRUE(!settled || report->extra_records == 0) << when << ": " << report->extra_records;
  };
  for (const int64_t base : {0, 3}) {  // no store yet; a store of 3 records
    int64_t crash_points = 0;
    for (int64_t n = 0;; ++n) {
      std::filesystem::remove_all(path_);
      faults->ResumeWrites();
      if (base > 0) {
        ASSERT_TRUE(ingest(0, base, "first"));
      }
      const int64_t before = faults->operations();
      faults->FailAfter(n);
      const bool committed = ingest(base, 5, "second");
      const int64_t used = faults->operations() - before;
      faults->DropUnsynced();  // the power goes
      faults->ResumeWrites();
      const std::string when =
          "store of " + std::to_string(base) + ", crash after " + std::to_string(n) + " operations";
      auto store = RocksDbTokenStore::Open(path_);
      if (store.status().code() == StatusCode::kNotFound) {  // nothing was ever committed to it
        EXPECT_FALSE(committed || base > 0) << when << ": a committed store is gone";
      } else {
        ASSERT_TRUE(store.ok()) << when << ": " << store.status().ToString();
        const int64_t records = (*store)->num_sequences();
        store->reset();
        if (committed) {
          EXPECT_EQ(records, base + 5) << when;
        } else {
          EXPECT_TRUE(records == base || records == base + 5) << when;
        }
        expect_store(records, /*settled=*/false, when);
        if (HasFatalFailure()) return;
        // The next ingest goes on from what survived.
        ASSERT_TRUE(ingest(records, 2, "third")) << when;
        expect_store(records + 2, /*settled=*/true, when + ", then one more ingest");
      }
      if (committed && used < n) break;
      ++crash_points;
    }
    EXPECT_GE(crash_points, 20) << "store of " << base;
  }
}

TEST_F(TokenStoreTest, RecordsPastTheCommittedCount_AreIgnoredThenDroppedByTheNextIngest) {
  // What an ingest leaves that stopped after adding its table and before committing.
  WriteStore(5);
  WithRawDb([&](rocksdb::DB* db, const std::vector<rocksdb::ColumnFamilyHandle*>& handles) {
    for (char index : {5, 6}) {
      const std::string key = std::string(7, '\0') + index;
      ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), handles[1], key, "left over").ok());
    }
  });
  {
    auto store = RocksDbTokenStore::Open(path_);
    EXPECT_EQ((*store)->num_sequences(), 5);
    EXPECT_EQ((*store)->Verify(nullptr)->extra_records, 2);
  }
  auto w = TokenStoreWriter::Open(path_, Ident(), "{}");
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Append(Records(5, 1)).ok());
  ASSERT_TRUE((*w)->Commit({}, {Source("b", 8 - 3)}).ok());
  ASSERT_TRUE((*w)->Close().ok());
  w->reset();
  auto store = RocksDbTokenStore::Open(path_);
  EXPECT_EQ((*store)->num_sequences(), 6);
  auto report = (*store)->Verify(nullptr);
  EXPECT_EQ(report->bad_records, 0);
  EXPECT_EQ(report->extra_records, 0);  // record 6 is gone, record 5 is the new one
  std::vector<uint32_t> out(8);
  const int64_t index = 5;
  ASSERT_TRUE((*store)->Read({&index, 1}, out.data()).ok());
  EXPECT_EQ(out, Records(5, 1));
}

TEST_F(TokenStoreTest, Rollback_AfterAppends_ThenAppendsAgain) {
  WriteStore(3);
  auto w = TokenStoreWriter::Open(path_, Ident(), "{}");
  ASSERT_TRUE((*w)->Append(Records(3, 2)).ok());
  const int64_t mark = (*w)->appended();
  ASSERT_TRUE((*w)->Append(std::vector<uint32_t>(3 * 8, 999)).ok());  // a failing input's
  ASSERT_TRUE((*w)->RollbackTo(mark).ok());
  ASSERT_TRUE((*w)->Append(Records(5, 1)).ok());
  ASSERT_TRUE((*w)->Commit({}, {Source("b", 3 * 8 - 3)}).ok());
  ASSERT_TRUE((*w)->Close().ok());
  w->reset();
  auto store = RocksDbTokenStore::Open(path_);
  EXPECT_EQ((*store)->num_sequences(), 6);
  auto report = (*store)->Verify(nullptr);
  EXPECT_EQ(report->bad_records, 0);
  EXPECT_EQ(report->extra_records, 0);
  std::vector<uint32_t> out(3 * 8);
  const std::vector<int64_t> indices = {3, 4, 5};
  ASSERT_TRUE((*store)->Read(indices, out.data()).ok());
  EXPECT_EQ(out, Records(3, 3));
}

// Past several of the writer's background syncs of the table (every 4 MB): the records, in
// several appends, read back exactly.
TEST_F(TokenStoreTest, LargeAppend_SyncedWhileWritten_ReadsBack) {
  constexpr int64_t kRecords = 400'000;  // 12.8 MB of ids
  auto w = TokenStoreWriter::Open(path_, Ident(), "{}");
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  for (int64_t at = 0; at < kRecords; at += 50'000) {
    ASSERT_TRUE((*w)->Append(Records(at, 50'000)).ok());
  }
  ASSERT_TRUE((*w)->Commit({}, {Source("big", kRecords * 8)}).ok());
  ASSERT_TRUE((*w)->Close().ok());
  w->reset();
  auto store = RocksDbTokenStore::Open(path_);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ((*store)->num_sequences(), kRecords);
  const std::vector<int64_t> indices = {0, 131'071, 262'144, kRecords - 1};
  std::vector<uint32_t> out(indices.size() * 8);
  ASSERT_TRUE((*store)->Read(indices, out.data()).ok());
  for (size_t k = 0; k < indices.size(); ++k) {
    const std::vector<uint32_t> want = Records(indices[k], 1);
    EXPECT_TRUE(std::equal(want.begin(), want.end(), out.begin() + k * 8)) << "record " << k;
  }
  EXPECT_EQ((*store)->Verify(nullptr)->bad_records, 0);
}

TEST_F(TokenStoreTest, Rollback_DropsUncommittedRecords) {
  WriteStore(3);
  auto w = TokenStoreWriter::Open(path_, Ident(), "{}");
  ASSERT_TRUE((*w)->Append(Records(3, 4)).ok());
  ASSERT_TRUE((*w)->Rollback().ok());
  ASSERT_TRUE((*w)->Close().ok());
  w->reset();
  auto store = RocksDbTokenStore::Open(path_);
  EXPECT_EQ((*store)->num_sequences(), 3);
  EXPECT_EQ((*store)->Verify(nullptr)->extra_records, 0);
}

TEST_F(TokenStoreTest, OtherSeqLenOrTokenizer_IsRefusedByTheWriter) {
  WriteStore(2);
  auto longer = TokenStoreWriter::Open(path_, Ident(15), "{}");
  ASSERT_FALSE(longer.ok());
  EXPECT_EQ(longer.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(longer.status().message().find("seq_len 7, this ingest uses 15"), std::string::npos);
  TokenStoreWriter::Identity other = Ident();
  other.tokenizer_hash = "fff";
  EXPECT_EQ(TokenStoreWriter::Open(path_, other, "{}").status().code(),
            StatusCode::kFailedPrecondition);
}

TEST_F(TokenStoreTest, MissingSourceRecord_IsDataLoss) {
  WriteStore(2);
  WithRawDb([](rocksdb::DB* db, const std::vector<rocksdb::ColumnFamilyHandle*>& handles) {
    ASSERT_TRUE(db->Delete(rocksdb::WriteOptions(), handles[2], "source/000000000000").ok());
  });
  const Status s = RocksDbTokenStore::Open(path_).status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("metadata names 1 sources, the store holds 0"), std::string::npos)
      << s.ToString();
}

TEST_F(TokenStoreTest, NoStore_IsNotFound) {
  EXPECT_EQ(RocksDbTokenStore::Open(dir_ + "/nothing").status().code(), StatusCode::kNotFound);
}

TEST(StoreMetadata, Json_RoundTrips) {
  StoreMetadata m;
  m.tokenizer = "phi4";
  m.tokenizer_hash = "223921";
  m.vocab_size = 100352;
  m.seq_len = 4;
  m.num_sequences = 2;
  m.tail = {5, 6};
  m.num_tokens = 12;
  m.num_documents = 3;
  m.sources = {{"a.txt", 10, "00ff", 3, 12, 1}};
  int64_t num_sources = 0;
  StatusOr<StoreMetadata> back = StoreMetadata::FromJson(m.ToJson(false), "x", &num_sources);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(num_sources, 1);
  EXPECT_TRUE(back->sources.empty());
  StatusOr<StoreSource> src =
      StoreMetadata::SourceFromJson(StoreMetadata::SourceToJson(m.sources[0]), "y");
  ASSERT_TRUE(src.ok());
  back->sources.push_back(*src);
  EXPECT_EQ(*back, m);
}

TEST(StoreMetadata, BadRecords_AreDataLossWithTheReason) {
  int64_t n = 0;
  EXPECT_NE(StoreMetadata::FromJson("{", "s", &n).status().message().find("not JSON"),
            std::string::npos);
  EXPECT_NE(StoreMetadata::FromJson(R"({"magic": "other"})", "s", &n)
                .status()
                .message()
                .find("not a fullband token store"),
            std::string::npos);
  EXPECT_NE(StoreMetadata::FromJson(R"({"magic": "fullband-token-store", "version": 9})", "s", &n)
                .status()
                .message()
                .find("version 9"),
            std::string::npos);
  StoreMetadata m;
  m.tokenizer = "phi4";
  m.vocab_size = 10;
  m.seq_len = 4;
  m.num_sequences = 1;
  m.num_tokens = 6;  // should be 5
  m.sources = {{"a", 1, "h", 1, 6, 0}};
  const Status s = m.CheckConsistent("s");
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("num_tokens 6"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace fullband::dataloader

// BatchReader: batches in sampler order with and without prefetch, exact resumption from a
// saved cursor, disjoint DP ranks, and read errors surfaced for the batch that hit them.
#include "dataloader/reader.h"

#include <gtest/gtest.h>

#include <set>

namespace fullband::dataloader {
namespace {

constexpr int64_t kSeqLen = 3;

// Record r holds r·4, r·4 + 1, ... so a batch row names its record.
std::unique_ptr<MemoryTokenStore> Store(const std::string& name, int64_t n, uint32_t offset = 0) {
  std::vector<uint32_t> t(static_cast<size_t>(n * (kSeqLen + 1)));
  for (size_t i = 0; i < t.size(); ++i) t[i] = offset + static_cast<uint32_t>(i);
  return std::make_unique<MemoryTokenStore>(name, kSeqLen, 100000, std::move(t));
}

ReaderOptions Options(int64_t batch, int64_t prefetch, int rank = 0, int dp = 1, int threads = 1) {
  ReaderOptions o;
  o.threads = threads;
  o.batch_size = batch;
  o.seq_len = kSeqLen;
  o.vocab_size = 100000;
  o.prefetch = prefetch;
  o.dp_rank = rank;
  o.dp_size = dp;
  return o;
}

std::vector<std::vector<int32_t>> ReadAll(BatchReader* r, int batches) {
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < batches; ++i) {
    StatusOr<Batch> b = r->Next();
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    out.emplace_back(b->tokens.begin(), b->tokens.end());
  }
  return out;
}

TEST(BatchReader, Batches_FollowTheSamplerOrder) {
  auto store = Store("s", 50);
  StatusOr<Sampler> sampler = Sampler::Create({50}, {1.0}, 4);
  auto reader = BatchReader::Create({store.get()}, *sampler, sampler->Start(), Options(5, 3));
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  SamplerCursor c = sampler->Start();
  for (int step = 0; step < 12; ++step) {  // across an epoch boundary
    StatusOr<Batch> b = (*reader)->Next();
    ASSERT_TRUE(b.ok());
    for (int row = 0; row < 5; ++row) {
      const int64_t index = sampler->Next(&c).index;
      for (int64_t i = 0; i <= kSeqLen; ++i) {
        ASSERT_EQ(b->tokens[row * (kSeqLen + 1) + i], index * (kSeqLen + 1) + i);
      }
    }
    EXPECT_EQ(b->cursor_after, c);
  }
}

TEST(BatchReader, Prefetch_DoesNotChangeTheStream) {
  auto a = Store("a", 40), b = Store("b", 13, 5000);
  StatusOr<Sampler> sampler = Sampler::Create({40, 13}, {0.7, 0.3}, 8);
  auto sync = BatchReader::Create({a.get(), b.get()}, *sampler, sampler->Start(), Options(4, 0));
  auto ahead = BatchReader::Create({a.get(), b.get()}, *sampler, sampler->Start(), Options(4, 6));
  auto parallel = BatchReader::Create({a.get(), b.get()}, *sampler, sampler->Start(),
                                      Options(4, 5, 0, 1, /*threads=*/3));
  const auto expect = ReadAll(sync->get(), 60);
  EXPECT_EQ(ReadAll(ahead->get(), 60), expect);
  EXPECT_EQ(ReadAll(parallel->get(), 60), expect);
}

TEST(BatchReader, SavedCursor_ResumesWithExactlyTheNextBatch) {
  auto a = Store("a", 40), b = Store("b", 13, 5000);
  StatusOr<Sampler> sampler = Sampler::Create({40, 13}, {0.7, 0.3}, 8);
  auto first = BatchReader::Create({a.get(), b.get()}, *sampler, sampler->Start(), Options(4, 2));
  SamplerCursor saved;
  for (int i = 0; i < 7; ++i) saved = (*first)->Next()->cursor_after;
  const auto expect = ReadAll(first->get(), 10);
  auto resumed = BatchReader::Create({a.get(), b.get()}, *sampler, saved, Options(4, 2));
  ASSERT_TRUE(resumed.ok());
  EXPECT_EQ(ReadAll(resumed->get(), 10), expect);
}

TEST(BatchReader, DataParallelRanks_ReadDisjointSequencesThatCoverTheEpoch) {
  auto store = Store("s", 48);
  StatusOr<Sampler> sampler = Sampler::Create({48}, {1.0}, 2);
  std::set<int32_t> first_tokens;
  for (int rank = 0; rank < 2; ++rank) {
    auto r = BatchReader::Create({store.get()}, *sampler, sampler->Start(), Options(3, 2, rank, 2));
    for (const auto& batch : ReadAll(r->get(), 8)) {  // 8 steps × 3 rows × 2 ranks = 48
      for (int row = 0; row < 3; ++row) first_tokens.insert(batch[row * (kSeqLen + 1)]);
    }
  }
  EXPECT_EQ(first_tokens.size(), 48u);
}

// A store whose record `bad_` is corrupt.
class BrokenStore : public TokenStore {
 public:
  explicit BrokenStore(int64_t bad) : bad_(bad) {}
  const std::string& name() const override { return name_; }
  int64_t num_sequences() const override { return 10; }
  int64_t seq_len() const override { return kSeqLen; }
  int64_t vocab_size() const override { return 100; }
  Status Read(std::span<const int64_t> indices, uint32_t* out) const override {
    for (int64_t i : indices) {
      if (i == bad_) return DataLossError(name_ + ": sequence " + std::to_string(i) + ": bad");
      for (int64_t k = 0; k <= kSeqLen; ++k) *out++ = static_cast<uint32_t>(i);
    }
    return OkStatus();
  }

 private:
  std::string name_ = "broken";
  int64_t bad_;
};

class CorruptRecord : public ::testing::TestWithParam<int> {};

TEST_P(CorruptRecord, IsReturnedAsAnErrorAndStopsTheReader) {
  BrokenStore store(/*bad=*/6);
  StatusOr<Sampler> sampler = Sampler::Create({10}, {1.0}, 0);
  auto reader =
      BatchReader::Create({&store}, *sampler, sampler->Start(), Options(2, 3, 0, 1, GetParam()));
  Status error;
  int good = 0;
  for (int i = 0; i < 5 && error.ok(); ++i) {
    StatusOr<Batch> b = (*reader)->Next();
    if (b.ok()) {
      ++good;
    } else {
      error = b.status();
    }
  }
  EXPECT_EQ(error.code(), StatusCode::kDataLoss);
  EXPECT_NE(error.message().find("broken: sequence 6"), std::string::npos);
  EXPECT_LT(good, 5);
  EXPECT_EQ((*reader)->Next().status().code(), StatusCode::kFailedPrecondition);
}

INSTANTIATE_TEST_SUITE_P(ReadingThreads, CorruptRecord, ::testing::Values(1, 3));

TEST(BatchReader, VocabularyAndSourceCountMismatches_AreInvalidNamingThem) {
  auto a = Store("web", 10), b = Store("books", 10);
  StatusOr<Sampler> one = Sampler::Create({10}, {1.0}, 0);
  auto reader = BatchReader::Create({a.get(), b.get()}, *one, one->Start(), Options(2, 0));
  EXPECT_EQ(reader.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(reader.status().message().find("2 stores for a sampler of 1 sources"),
            std::string::npos)
      << reader.status().message();
  ReaderOptions small = Options(2, 0);
  small.vocab_size = 50000;
  reader = BatchReader::Create({a.get()}, *one, one->Start(), small);
  EXPECT_EQ(reader.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(reader.status().message().find(
                "web: the store's vocabulary of 100000 ids does not fit model.vocab_size 50000"),
            std::string::npos)
      << reader.status().message();
  reader = BatchReader::Create({a.get()}, *one, SamplerCursor{1, {0, 0}}, Options(2, 0));
  EXPECT_EQ(reader.status().code(), StatusCode::kInvalidArgument);
}

TEST(BatchReader, MismatchedSeqLen_IsInvalidNamingTheStore) {
  auto store = Store("web", 10);
  StatusOr<Sampler> sampler = Sampler::Create({10}, {1.0}, 0);
  ReaderOptions o = Options(2, 0);
  o.seq_len = 8;
  auto reader = BatchReader::Create({store.get()}, *sampler, sampler->Start(), o);
  EXPECT_EQ(reader.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(reader.status().message().find("web: the store holds sequences of seq_len 3"),
            std::string::npos);
}

}  // namespace
}  // namespace fullband::dataloader

// Sampler: permutations are bijections, epochs visit every index once, cursors restore the
// stream exactly, DP shards are disjoint and cover, and blending follows the weights.
#include "dataloader/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <vector>

namespace fullband::dataloader {
namespace {

class PermutationSizes : public ::testing::TestWithParam<uint64_t> {};

TEST_P(PermutationSizes, Apply_IsABijectionOfTheRange) {
  const uint64_t n = GetParam();
  const Permutation p(n, 42);
  std::vector<int> seen(n, 0);
  for (uint64_t x = 0; x < n; ++x) {
    const uint64_t y = p.Apply(x);
    ASSERT_LT(y, n);
    ++seen[y];
  }
  for (uint64_t y = 0; y < n; ++y) ASSERT_EQ(seen[y], 1) << "index " << y;
}

INSTANTIATE_TEST_SUITE_P(Sizes, PermutationSizes,
                         ::testing::Values(1u, 2u, 3u, 5u, 16u, 17u, 1000u, 4097u, 65536u,
                                           100003u));

TEST(Permutation, DifferentKeys_GiveDifferentOrders) {
  const Permutation a(1000, 1), b(1000, 2);
  int same = 0;
  for (uint64_t x = 0; x < 1000; ++x) same += a.Apply(x) == b.Apply(x);
  EXPECT_LT(same, 20);  // ≈ 1 expected for independent orders
}

TEST(Permutation, Order_IsNotCloseToTheIdentity) {
  // Neighbours should land far apart: the mean |p(x+1) − p(x)| of a random order is n/3.
  const uint64_t n = 10000;
  const Permutation p(n, 7);
  double gap = 0;
  for (uint64_t x = 0; x + 1 < n; ++x) {
    gap += std::fabs(static_cast<double>(p.Apply(x + 1)) - static_cast<double>(p.Apply(x)));
  }
  gap /= static_cast<double>(n - 1);
  EXPECT_NEAR(gap, n / 3.0, n * 0.03);
}

StatusOr<Sampler> One(int64_t n, uint64_t seed) { return Sampler::Create({n}, {1.0}, seed); }

TEST(Sampler, Epoch_VisitsEveryIndexExactlyOnce) {
  StatusOr<Sampler> s = One(777, 3);
  ASSERT_TRUE(s.ok());
  SamplerCursor c = s->Start();
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    std::set<int64_t> seen;
    for (int i = 0; i < 777; ++i) {
      const Sampler::Draw d = s->Next(&c);
      EXPECT_EQ(d.epoch, epoch);
      seen.insert(d.index);
    }
    EXPECT_EQ(seen.size(), 777u);
  }
}

TEST(Sampler, Epochs_HaveDifferentOrders) {
  StatusOr<Sampler> s = One(500, 3);
  SamplerCursor c = s->Start();
  std::vector<int64_t> first, second;
  for (int i = 0; i < 500; ++i) first.push_back(s->Next(&c).index);
  for (int i = 0; i < 500; ++i) second.push_back(s->Next(&c).index);
  EXPECT_NE(first, second);
}

TEST(Sampler, SameSeed_GivesSameOrder_OtherSeedAnother) {
  StatusOr<Sampler> a = One(300, 9), b = One(300, 9), c = One(300, 10);
  SamplerCursor ca = a->Start(), cb = b->Start(), cc = c->Start();
  int differ = 0;
  for (int i = 0; i < 600; ++i) {
    const int64_t x = a->Next(&ca).index;
    EXPECT_EQ(x, b->Next(&cb).index);
    differ += x != c->Next(&cc).index;
  }
  EXPECT_GT(differ, 500);
}

TEST(Sampler, RestoredCursor_ContinuesIdentically) {
  StatusOr<Sampler> s = Sampler::Create({100, 37, 5}, {0.5, 0.3, 0.2}, 11);
  ASSERT_TRUE(s.ok());
  SamplerCursor c = s->Start();
  for (int i = 0; i < 123; ++i) s->Next(&c);  // mid-epoch for every source
  SamplerCursor saved = c;                    // what a checkpoint keeps
  std::vector<std::pair<int, int64_t>> expect;
  for (int i = 0; i < 400; ++i) {
    const Sampler::Draw d = s->Next(&c);
    expect.emplace_back(d.source, d.index);
  }
  StatusOr<Sampler> again = Sampler::Create({100, 37, 5}, {0.5, 0.3, 0.2}, 11);
  for (int i = 0; i < 400; ++i) {
    const Sampler::Draw d = again->Next(&saved);
    ASSERT_EQ(std::make_pair(d.source, d.index), expect[i]) << "draw " << i;
  }
}

TEST(Sampler, CursorAt_EqualsTheCursorReachedByDrawing) {
  StatusOr<Sampler> s = Sampler::Create({10, 20}, {1.0, 3.0}, 5);
  SamplerCursor c = s->Start();
  for (int i = 0; i < 250; ++i) s->Next(&c);
  EXPECT_EQ(s->CursorAt(250), c);
  StatusOr<Sampler> one = One(10, 5);
  SamplerCursor c1 = one->Start();
  for (int i = 0; i < 25; ++i) one->Next(&c1);
  EXPECT_EQ(one->CursorAt(25), c1);
}

TEST(Sampler, DataParallelShards_AreDisjointAndCoverTheEpoch) {
  const int64_t n = 96, batch = 4;
  const int dp = 3;
  StatusOr<Sampler> s = One(n, 17);
  std::multiset<int64_t> all;
  std::vector<Sampler::Draw> draws;
  for (int rank = 0; rank < dp; ++rank) {
    SamplerCursor c = s->Start();
    for (int64_t step = 0; step < n / (batch * dp); ++step) {
      s->NextBatch(rank, dp, batch, &c, &draws);
      ASSERT_EQ(draws.size(), static_cast<size_t>(batch));
      for (const auto& d : draws) all.insert(d.index);
    }
    EXPECT_EQ(c.draws, static_cast<uint64_t>(n));
  }
  EXPECT_EQ(all.size(), static_cast<size_t>(n));
  EXPECT_EQ(std::set<int64_t>(all.begin(), all.end()).size(), static_cast<size_t>(n));
}

// Rank r's batch of a step holds the contiguous slice [r·batch, (r + 1)·batch) of the step's
// batch × dp draws of the one stream, blended or not, and every rank's cursor after the batch
// is the stream's.
TEST(Sampler, DataParallelShards_AreContiguousSlicesOfTheGlobalBatch) {
  const int64_t batch = 5;
  const int dp = 3;
  StatusOr<Sampler> s = Sampler::Create({40, 70, 9}, {0.5, 0.3, 0.2}, 31);
  ASSERT_TRUE(s.ok());
  SamplerCursor stream = s->Start();
  std::vector<Sampler::Draw> all;
  for (int64_t i = 0; i < 4 * batch * dp; ++i) all.push_back(s->Next(&stream));
  std::vector<Sampler::Draw> draws;
  for (int rank = 0; rank < dp; ++rank) {
    SamplerCursor c = s->Start();
    for (int step = 0; step < 4; ++step) {
      s->NextBatch(rank, dp, batch, &c, &draws);
      ASSERT_EQ(draws.size(), static_cast<size_t>(batch));
      for (int64_t i = 0; i < batch; ++i) {
        const Sampler::Draw& want = all[static_cast<size_t>((step * dp + rank) * batch + i)];
        EXPECT_EQ(draws[i].source, want.source);
        EXPECT_EQ(draws[i].index, want.index);
        EXPECT_EQ(draws[i].epoch, want.epoch);
      }
    }
    EXPECT_EQ(c, stream);
  }
}

TEST(Sampler, Blend_FollowsTheWeights) {
  StatusOr<Sampler> s = Sampler::Create({1000, 1000, 1000}, {0.6, 0.3, 0.1}, 23);
  SamplerCursor c = s->Start();
  const int draws = 60000;
  for (int i = 0; i < draws; ++i) s->Next(&c);
  // Chi-square with 2 degrees of freedom; 13.8 is its 0.999 quantile.
  const double expect[3] = {0.6, 0.3, 0.1};
  double chi2 = 0;
  for (int k = 0; k < 3; ++k) {
    const double e = expect[k] * draws;
    chi2 += (c.consumed[k] - e) * (c.consumed[k] - e) / e;
  }
  EXPECT_LT(chi2, 13.8);
}

TEST(Sampler, BadArguments_AreInvalid) {
  const auto error = [](std::vector<int64_t> sizes, std::vector<double> weights) {
    const Status s = Sampler::Create(std::move(sizes), std::move(weights), 0).status();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    return s.message();
  };
  EXPECT_NE(error({}, {}).find("no data source"), std::string::npos);
  EXPECT_NE(error({10}, {1.0, 2.0}).find("1 sources but 2 weights"), std::string::npos);
  EXPECT_NE(error({0}, {1.0}).find("source 0 holds no sequence"), std::string::npos);
  EXPECT_NE(error({10, 10}, {1.0, 0.0}).find("source 1 has weight 0"), std::string::npos);
  EXPECT_NE(error({10, 10}, {std::nan(""), 1.0}).find("source 0 has weight nan"),
            std::string::npos);
  EXPECT_NE(error({10}, {-1.0}).find("must be > 0"), std::string::npos);
  EXPECT_NE(error({10}, {INFINITY}).find("source 0 has weight inf"), std::string::npos);
  StatusOr<Sampler> negative = Sampler::Create({10, 10}, {1.0, -1.0}, 0);
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.status().message().find("source 1 has weight"), std::string::npos);
}

TEST(Sampler, ForeignCursor_IsRejected) {
  StatusOr<Sampler> s = Sampler::Create({10, 10}, {1.0, 1.0}, 0);
  EXPECT_FALSE(s->CheckCursor(SamplerCursor{3, {3}}).ok());
  EXPECT_FALSE(s->CheckCursor(SamplerCursor{3, {1, 1}}).ok());
  EXPECT_TRUE(s->CheckCursor(SamplerCursor{3, {1, 2}}).ok());
}

}  // namespace
}  // namespace fullband::dataloader

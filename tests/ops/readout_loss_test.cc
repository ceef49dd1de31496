// ReadoutCrossEntropy (ops/readout_loss.h): chunked logits + cross-entropy + z-loss, fused with
// its backward. Checked against a float64 loss written here and its central finite differences,
// for chunk sizes that do and do not divide N, with ignored targets.
#include "ops/readout_loss.h"

#include <cmath>

#include "tests/ops/backend_fixture.h"

namespace fullband::ops::test {
namespace {

constexpr int32_t kIgnore = -1;

// ce_scale · Σ (lse - logit[target]) + z_scale · Σ lse² over counted rows, in float64.
double ReferenceLoss(const ref::Vec& h, const ref::Vec& e, const std::vector<int32_t>& targets,
                     int64_t n, int64_t d, int64_t v, double ce_scale, double z_scale,
                     double* ce_sum = nullptr, double* z_sum = nullptr) {
  double ce = 0, z = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (targets[i] == kIgnore) continue;
    std::vector<double> logits(v);
    double m = -INFINITY;
    for (int64_t j = 0; j < v; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < d; ++k) acc += h[i * d + k] * e[j * d + k];
      logits[j] = acc;
      m = std::max(m, acc);
    }
    double sum = 0;
    for (double x : logits) sum += std::exp(x - m);
    const double lse = m + std::log(sum);
    ce += lse - logits[targets[i]];
    z += lse * lse;
  }
  if (ce_sum) *ce_sum = ce;
  if (z_sum) *z_sum = z;
  return ce_scale * ce + z_scale * z;
}

class ReadoutLossTest : public BackendTest {
 protected:
  void RunCase(int64_t chunk, int64_t pitch = 50);
};

// `pitch`: the logits block's row pitch (≥ V = 50).
void ReadoutLossTest::RunCase(int64_t chunk, int64_t pitch) {
  const int64_t n = 7, d = 12, v = 50;
  const double ce_scale = 1.0 / 5, z_scale = 1e-2 / 5;  // 5 counted rows below
  const std::vector<float> h = Normal(n * d, 0.5f);
  const std::vector<float> e = Normal(v * d, 0.5f);
  std::vector<int32_t> targets = {3, kIgnore, 49, 0, 17, kIgnore, 3};
  // Parameter gradient dE accumulates onto a nonzero prefill; dh is overwritten (NaN prefill).
  const std::vector<float> de_prefill = Normal(v * d, 1.0f);
  Tensor th = Upload(h, {n, d}), te = Upload(e, {v, d}), tt = Upload(targets, {n});
  Tensor dh = Nans({n, d});
  Tensor de = Upload(de_prefill, {v, d});
  ReadoutBuffers buf{Nans({chunk, pitch}), Nans({n}), Nans({n})};
  const ReadoutLossSums sums = ReadoutCrossEntropy(backend(), th, te, tt, targets.data(), kIgnore,
                                                   buf, ce_scale, z_scale, dh, de);
  const ref::Vec h64 = ToF64(h), e64 = ToF64(e);
  double ce_ref, z_ref;
  ReferenceLoss(h64, e64, targets, n, d, v, ce_scale, z_scale, &ce_ref, &z_ref);
  EXPECT_EQ(sums.counted, 5);
  // Sums of 5 rows of float32 log-sum-exp over 50 terms: relative 1e-5 is ~100 ulp.
  EXPECT_NEAR(sums.ce_sum, ce_ref, 1e-5 * std::abs(ce_ref));
  EXPECT_NEAR(sums.z_sum, z_ref, 1e-5 * std::abs(z_ref));

  // Central differences of the float64 loss (h = 1e-6: truncation ~1e-12, rounding ~1e-10).
  const double step = 1e-6;
  ref::Vec dh_fd(n * d), de_fd(v * d);
  ref::Vec hp = h64, ep = e64;
  for (int64_t i = 0; i < n * d; ++i) {
    hp[i] = h64[i] + step;
    const double up = ReferenceLoss(hp, e64, targets, n, d, v, ce_scale, z_scale);
    hp[i] = h64[i] - step;
    const double down = ReferenceLoss(hp, e64, targets, n, d, v, ce_scale, z_scale);
    hp[i] = h64[i];
    dh_fd[i] = (up - down) / (2 * step);
  }
  for (int64_t i = 0; i < v * d; ++i) {
    ep[i] = e64[i] + step;
    const double up = ReferenceLoss(h64, ep, targets, n, d, v, ce_scale, z_scale);
    ep[i] = e64[i] - step;
    const double down = ReferenceLoss(h64, ep, targets, n, d, v, ce_scale, z_scale);
    ep[i] = e64[i];
    de_fd[i] = (up - down) / (2 * step);
  }
  // float32 products over d = 12 and sums over v = 50 classes: 1e-4 of the largest entry.
  EXPECT_TRUE(NearMax(Download(dh), dh_fd, 1e-4));
  EXPECT_TRUE(NearMax(Download(de), Plus(ToF64(de_prefill), de_fd), 1e-4));
}

TEST_P(ReadoutLossTest, ChunkDividesN_MatchesFloat64LossAndFiniteDifferences) { RunCase(7); }

TEST_P(ReadoutLossTest, ChunkSmallerThanN_MatchesFloat64LossAndFiniteDifferences) { RunCase(3); }

TEST_P(ReadoutLossTest, PaddedRowPitch_MatchesFloat64LossAndFiniteDifferences) {
  EXPECT_EQ(LogitsPitch(50), 80);  // 4 lines of 16 floats, then one more: an odd count
  RunCase(3, LogitsPitch(50));
}

TEST(LogitsPitchTest, IsAnOddNumberOfCacheLinesAtLeastV) {
  for (int64_t v : {1, 16, 17, 50, 4096, 50257, 100352}) {
    const int64_t ld = LogitsPitch(v);
    EXPECT_GE(ld, v);
    EXPECT_LT(ld, v + 32);
    EXPECT_EQ(ld % 16, 0);
    EXPECT_EQ(ld / 16 % 2, 1) << "V = " << v;
  }
  EXPECT_EQ(LogitsPitch(4096), 4112);
}

TEST_P(ReadoutLossTest, ForwardOnly_LeavesNoGradientAndCountsRows) {
  const int64_t n = 4, d = 8, v = 30;
  const std::vector<float> h = Normal(n * d), e = Normal(v * d);
  std::vector<int32_t> targets = {kIgnore, kIgnore, 29, 1};
  Tensor th = Upload(h, {n, d}), te = Upload(e, {v, d}), tt = Upload(targets, {n});
  ReadoutBuffers buf{Nans({2, v}), Nans({n}), Nans({n})};
  const ReadoutLossSums sums =
      ReadoutCrossEntropy(backend(), th, te, tt, targets.data(), kIgnore, buf, 1, 0, {}, {});
  double ce_ref, z_ref;
  ReferenceLoss(ToF64(h), ToF64(e), targets, n, d, v, 1, 0, &ce_ref, &z_ref);
  EXPECT_EQ(sums.counted, 2);
  EXPECT_NEAR(sums.ce_sum, ce_ref, 1e-5 * std::abs(ce_ref));
}

FB_INSTANTIATE_BACKEND_TEST_SUITE(ReadoutLossTest);

}  // namespace
}  // namespace fullband::ops::test

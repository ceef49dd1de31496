// CrossEntropyForward/Backward against the float64 reference: loss and lse for V up to a few
// thousand and the full vocabulary (V = 100352), ignored targets (ignore_id -1 and a custom
// one), large logit offsets; the backward by finite differences of
// Σ_counted ce_scale·loss + z_scale·lse² with both scales nonzero, each alone, dlogits
// overwritten (zero on ignored rows) or aliasing logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "tests/ops/backend_fixture.h"
#include "tests/ops/reference.h"

namespace fullband::ops::test {
namespace {

// lse sums V ≤ 3001 exps in float32: ~√V·ε ≈ 7e-6 relative error of the sum, i.e. absolute
// error of lse, ≲ 1e-6 of the largest |lse| or loss; 2e-5 leaves margin.
constexpr double kForwardTol = 2e-5;
// V = 100352: random-walk rounding √V·ε ≈ 4e-5 of the sum (worst case V·ε ≈ 1e-2), against
// |lse| ≈ 12.
constexpr double kFullVocabTol = 1e-4;
// p = exp(logit - lse) errs by ~ε·|logit - lse| (≲ 2e-6 relative per element) on top of the
// float-rounded saved lse; relative to the largest |dlogit| (~ce_scale) that is ≲ 1e-6.
constexpr double kBackwardTol = 2e-5;
// The same, per element relative to itself.
constexpr double kElementTol = 2e-5;

constexpr int32_t kIgnore = -1;

struct Case {
  int64_t n, v;
};

class CrossEntropyTest : public BackendTest {
 protected:
  // Targets in [0, V) with about a quarter ignored, including 0 and V - 1 when N allows.
  std::vector<int32_t> Targets(int64_t n, int64_t v, int32_t ignore_id) {
    std::vector<int32_t> targets = RandomIds(n, 0, static_cast<int32_t>(v));
    for (int64_t i = 0; i < n; ++i) {
      if (RandomIds(1, 0, 4)[0] == 0) targets[i] = ignore_id;
    }
    if (n >= 3) {
      targets[0] = 0;
      targets[1] = ignore_id;
      targets[2] = static_cast<int32_t>(v - 1);
    }
    return targets;
  }

  void CheckForward(int64_t n, int64_t v, const std::vector<float>& logits,
                    const std::vector<int32_t>& targets, int32_t ignore_id, double tol) {
    SCOPED_TRACE(::testing::Message() << "N=" << n << " V=" << v << " ignore_id=" << ignore_id);
    Tensor loss = Nans({n}), lse = Nans({n});
    backend().CrossEntropyForward(loss, lse, Upload(logits, {n, v}), v, Upload(targets, {n}),
                                  ignore_id);
    ref::Vec want_loss, want_lse;
    ref::CrossEntropy(ToF64(logits), targets, n, v, ignore_id, &want_loss, &want_lse);
    EXPECT_TRUE(NearMax(Download(loss), want_loss, tol)) << "loss (0 on ignored rows)";
    EXPECT_TRUE(NearMax(Download(lse), want_lse, tol)) << "lse (every row, ignored included)";
  }

  // dlogits against float64 central differences of the objective, taken one row at a time:
  // rows are separate terms, so perturbing row r moves only row r's term.
  void CheckBackward(int64_t n, int64_t v, float ce_scale, float z_scale, int32_t ignore_id,
                     bool alias) {
    SCOPED_TRACE(::testing::Message()
                 << "N=" << n << " V=" << v << " ce_scale=" << ce_scale << " z_scale=" << z_scale
                 << " ignore_id=" << ignore_id << " alias=" << alias);
    const std::vector<float> logits = Normal(n * v, 2.0f);
    const std::vector<int32_t> targets = Targets(n, v, ignore_id);
    ref::Vec loss, lse;
    ref::CrossEntropy(ToF64(logits), targets, n, v, ignore_id, &loss, &lse);
    ref::Vec want(n * v);
    for (int64_t r = 0; r < n; ++r) {
      ref::Vec row(logits.begin() + r * v, logits.begin() + (r + 1) * v);
      const std::vector<int32_t> target = {targets[r]};
      const ref::Vec grad = ref::NumericalGradient(
          [&] {
            return ref::CrossEntropyObjective(row, target, 1, v, ignore_id, ce_scale, z_scale);
          },
          &row);
      std::copy(grad.begin(), grad.end(), want.begin() + r * v);
    }

    Tensor tlogits = Upload(logits, {n, v});
    Tensor dlogits = alias ? tlogits : Nans({n, v});
    backend().CrossEntropyBackward(dlogits, tlogits, v, Upload(ToF32(lse), {n}),
                                   Upload(targets, {n}), ce_scale, z_scale, ignore_id);
    EXPECT_TRUE(NearMax(Download(dlogits), want, kBackwardTol));
  }
};
FB_INSTANTIATE_BACKEND_TEST_SUITE(CrossEntropyTest);

TEST_P(CrossEntropyTest, Forward_IgnoredTargets_MatchesReference) {
  for (const Case c : {Case{1, 7}, Case{7, 50}, Case{9, 1000}, Case{5, 3001}}) {
    CheckForward(c.n, c.v, Normal(c.n * c.v, 2.0f), Targets(c.n, c.v, kIgnore), kIgnore,
                 kForwardTol);
  }
}

TEST_P(CrossEntropyTest, Forward_LargeLogitOffsets_StaysFiniteAndMatchesReference) {
  // Rows shifted by ±80: exp overflows/underflows in float32 unless the row max is subtracted.
  const int64_t n = 4, v = 1000;
  std::vector<float> logits = Normal(n * v, 3.0f);
  for (int64_t i = 0; i < n * v; ++i) logits[i] += (i / v) % 2 == 0 ? 80.0f : -80.0f;
  const std::vector<int32_t> targets = {5, 999, kIgnore, 0};
  SCOPED_TRACE("offsets ±80");
  Tensor loss = Nans({n}), lse = Nans({n});
  backend().CrossEntropyForward(loss, lse, Upload(logits, {n, v}), v, Upload(targets, {n}),
                                kIgnore);
  ref::Vec want_loss, want_lse;
  ref::CrossEntropy(ToF64(logits), targets, n, v, kIgnore, &want_loss, &want_lse);
  // |lse| ≈ 90: its float32 rounding alone is ~ε·90 ≈ 1e-5 absolute, per element; the loss
  // (lse - logit, both ≈ 90) inherits that absolute error, so it gets atol 1e-4 (10× margin).
  EXPECT_TRUE(NearEach(Download(lse), want_lse, kForwardTol, 0)) << "lse";
  EXPECT_TRUE(NearEach(Download(loss), want_loss, 0, 1e-4)) << "loss";
}

TEST_P(CrossEntropyTest, Forward_CustomIgnoreId_SkipsRowsWithThatTarget) {
  const int64_t n = 7, v = 40;
  const std::vector<int32_t> targets = {3, 0, 3, 39, 12, 3, 1};
  CheckForward(n, v, Normal(n * v, 2.0f), targets, /*ignore_id=*/3, kForwardTol);
}

TEST_P(CrossEntropyTest, Forward_FullVocabulary_MatchesReference) {
  const int64_t n = 3, v = 100352;
  const std::vector<int32_t> targets = {12, kIgnore, static_cast<int32_t>(v - 1)};
  CheckForward(n, v, Normal(n * v, 1.0f), targets, kIgnore, kFullVocabTol);
}

TEST_P(CrossEntropyTest, Backward_CeAndZLoss_MatchesFiniteDifferences) {
  for (const Case c : {Case{1, 7}, Case{7, 50}, Case{3, 2053}}) {
    CheckBackward(c.n, c.v, /*ce_scale=*/0.5f, /*z_scale=*/0.1f, kIgnore, /*alias=*/false);
  }
}

TEST_P(CrossEntropyTest, Backward_EachScaleAlone_MatchesFiniteDifferences) {
  CheckBackward(5, 40, /*ce_scale=*/0.0f, /*z_scale=*/0.3f, kIgnore, false);
  CheckBackward(5, 40, /*ce_scale=*/1.0f / 3.0f, /*z_scale=*/0.0f, kIgnore, false);
  CheckBackward(4, 40, /*ce_scale=*/1.0f, /*z_scale=*/1e-5f, kIgnore, false);  // the defaults
}

TEST_P(CrossEntropyTest, Backward_DlogitsAliasesLogits_MatchesFiniteDifferences) {
  CheckBackward(7, 50, 0.5f, 0.1f, kIgnore, /*alias=*/true);
}

TEST_P(CrossEntropyTest, Backward_CustomIgnoreId_MatchesFiniteDifferences) {
  CheckBackward(7, 50, 0.5f, 0.1f, /*ignore_id=*/3, /*alias=*/false);
}

TEST_P(CrossEntropyTest, Backward_FullVocabulary_MatchesContractFormula) {
  // Too wide for finite differences; the formula of backend.h evaluated in float64 instead:
  // counted rows ce_scale·(p - onehot) + z_scale·2·lse·p, ignored rows 0.
  const int64_t n = 3, v = 100352;
  const float ce_scale = 0.25f, z_scale = 0.05f;
  const std::vector<float> logits = Normal(n * v, 1.0f);
  const std::vector<int32_t> targets = {12, kIgnore, static_cast<int32_t>(v - 1)};
  ref::Vec loss, lse;
  ref::CrossEntropy(ToF64(logits), targets, n, v, kIgnore, &loss, &lse);
  ref::Vec want(n * v, 0.0);
  for (int64_t r = 0; r < n; ++r) {
    if (targets[r] == kIgnore) continue;
    for (int64_t j = 0; j < v; ++j) {
      const double p = std::exp(logits[r * v + j] - lse[r]);
      want[r * v + j] = ce_scale * (p - (j == targets[r] ? 1.0 : 0.0)) + z_scale * 2 * lse[r] * p;
    }
  }
  Tensor dlogits = Nans({n, v});
  backend().CrossEntropyBackward(dlogits, Upload(logits, {n, v}), v, Upload(ToF32(lse), {n}),
                                 Upload(targets, {n}), ce_scale, z_scale, kIgnore);
  // Element by element, not against the largest entry (the one-hot one, ~ce_scale, which would
  // let the ~1e-5-sized others be far off): p errs by ~ε·|logit - lse| plus the saved lse's
  // rounding, ≲ 2e-6 relative; the floor only covers entries that are exactly zero.
  EXPECT_TRUE(NearEach(Download(dlogits), want, kElementTol, 1e-12));
}

// A vocabulary shard (ops/backend.h, kOtherShard): a row whose target another shard holds gets
// the local lse and loss 0 in forward, and in backward the softmax term only, with the given
// (here: made-up global) lse; the other rows are unchanged.
TEST_P(CrossEntropyTest, TargetOfAnotherShard_CountsTheRowWithoutTheOneHotTerm) {
  const int64_t n = 3, v = 50;
  const float ce_scale = 0.5f, z_scale = 0.1f;
  const std::vector<float> logits = Normal(n * v, 1.5f);
  const std::vector<int32_t> targets = {7, kOtherShard, kIgnore};
  Tensor loss = Nans({n}), lse = Nans({n});
  backend().CrossEntropyForward(loss, lse, Upload(logits, {n, v}), v, Upload(targets, {n}),
                                kIgnore);
  ref::Vec want_loss, want_lse;
  ref::CrossEntropy(ToF64(logits), {7, 0, kIgnore}, n, v, kIgnore, &want_loss, &want_lse);
  want_loss[1] = 0.0;
  EXPECT_TRUE(NearEach(Download(lse), want_lse, kForwardTol, 0)) << "lse";
  EXPECT_TRUE(NearEach(Download(loss), want_loss, kForwardTol, 1e-6)) << "loss";
  const std::vector<float> global_lse = {static_cast<float>(want_lse[0]),
                                         static_cast<float>(want_lse[1] + 0.7), 0.0f};
  Tensor dlogits = Nans({n, v});
  backend().CrossEntropyBackward(dlogits, Upload(logits, {n, v}), v, Upload(global_lse, {n}),
                                 Upload(targets, {n}), ce_scale, z_scale, kIgnore);
  ref::Vec want(n * v, 0.0);
  for (int64_t r = 0; r < 2; ++r) {
    for (int64_t j = 0; j < v; ++j) {
      const double p = std::exp(logits[r * v + j] - static_cast<double>(global_lse[r]));
      const double onehot = r == 0 && j == targets[0] ? 1.0 : 0.0;
      want[r * v + j] = ce_scale * (p - onehot) + z_scale * 2 * global_lse[r] * p;
    }
  }
  EXPECT_TRUE(NearEach(Download(dlogits), want, kElementTol, 1e-12));
}

// Rows ld > V apart: the same values as a contiguous block, and the padding between rows is
// neither read (it holds NaN) nor written.
TEST_P(CrossEntropyTest, RowPitch_MatchesContiguousAndLeavesThePaddingAlone) {
  const int64_t n = 5, v = 37, ld = 48;
  const std::vector<float> logits = Normal(n * v, 2.0f);
  const std::vector<int32_t> targets = Targets(n, v, kIgnore);
  std::vector<float> padded(n * ld, std::nanf(""));
  for (int64_t r = 0; r < n; ++r) std::copy_n(logits.begin() + r * v, v, padded.begin() + r * ld);

  Tensor loss = Nans({n}), lse = Nans({n}), ploss = Nans({n}), plse = Nans({n});
  const Tensor tt = Upload(targets, {n});
  backend().CrossEntropyForward(loss, lse, Upload(logits, {n, v}), v, tt, kIgnore);
  Tensor plogits = Upload(padded, {n, ld});
  const Tensor pview(plogits.data, DType::kF32, {n, v}, plogits.device);
  backend().CrossEntropyForward(ploss, plse, pview, ld, tt, kIgnore);
  EXPECT_EQ(Download(ploss), Download(loss));
  EXPECT_EQ(Download(plse), Download(lse));

  Tensor dlogits = Nans({n, v});
  backend().CrossEntropyBackward(dlogits, Upload(logits, {n, v}), v, lse, tt, 0.5f, 0.01f, kIgnore);
  backend().CrossEntropyBackward(pview, pview, ld, plse, tt, 0.5f, 0.01f, kIgnore);
  const std::vector<float> want = Download(dlogits), got = Download(plogits);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t j = 0; j < ld; ++j) {
      if (j < v) {
        EXPECT_EQ(got[r * ld + j], want[r * v + j]) << "row " << r << " column " << j;
      } else {
        EXPECT_TRUE(std::isnan(got[r * ld + j])) << "padding of row " << r << " was written";
      }
    }
  }
}

}  // namespace
}  // namespace fullband::ops::test

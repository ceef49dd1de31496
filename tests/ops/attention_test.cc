// AttentionForward/Backward against the float64 reference: causal GQA (H = Hkv, H = 4 with
// Hkv = 2, H = 6 with Hkv = 1) with and without a sliding window (query t sees key s iff
// s <= t and (W == 0 or t - W < s)), T = 1, 7, 33, 65 and 257, Dh = 8, 10, 16 and the
// production 64, 96, 128, 256, custom scale and
// large scores; out and lse both checked; the backward by float64 finite differences with
// dq, dk, dv overwritten; and CPU run-to-run bitwise determinism.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "tests/ops/backend_fixture.h"
#include "tests/ops/reference.h"

namespace fullband::ops::test {
namespace {

// Scores q·k over Dh ≤ 16 terms, exp (a few ulp, and ε·|score| from the rounded score), and a
// weighted sum over ≤ 257 keys: ≲ 2e-6 of the largest output; 2e-5 leaves margin.
constexpr double kForwardTol = 2e-5;
// Scores of magnitude ~150: exp(score - max) inherits ε·|score| ≈ 2e-5 relative error.
constexpr double kLargeScoreTol = 2e-4;
// Through the softmax the backward forms dS = P ⊙ (dP - Σ dout·out), a difference of similar
// numbers (~10× cancellation), then sums over ≤ 33 keys or queries: ~100·ε·10 ≈ 1e-4.
constexpr double kBackwardTol = 3e-4;

struct Case {
  int64_t b, t, h, hkv, dh;
  int64_t window = 0;
  float scale = 0.0f;
};

::testing::Message Describe(const Case& c) {
  return ::testing::Message() << "B=" << c.b << " T=" << c.t << " H=" << c.h << " Hkv=" << c.hkv
                              << " Dh=" << c.dh << " window=" << c.window << " scale=" << c.scale;
}

ref::AttentionDims Dims(const Case& c) {
  return {
      .b = c.b, .t = c.t, .h = c.h, .hkv = c.hkv, .dh = c.dh, .window = c.window, .scale = c.scale};
}

class AttentionTest : public BackendTest {
 protected:
  // Random q, k, v; q_stddev scales the scores.
  void MakeInputs(const Case& c, float q_stddev, std::vector<float>* q, std::vector<float>* k,
                  std::vector<float>* v) {
    *q = Normal(c.b * c.t * c.h * c.dh, q_stddev);
    *k = Normal(c.b * c.t * c.hkv * c.dh);
    *v = Normal(c.b * c.t * c.hkv * c.dh);
  }

  void CheckForward(const Case& c, double tol, float q_stddev = 1.0f) {
    SCOPED_TRACE(Describe(c));
    std::vector<float> q, k, v;
    MakeInputs(c, q_stddev, &q, &k, &v);
    Tensor out = Nans({c.b, c.t, c.h, c.dh});
    Tensor lse = Nans({c.b, c.h, c.t});
    backend().AttentionForward(
        out, lse, Upload(q, {c.b, c.t, c.h, c.dh}), Upload(k, {c.b, c.t, c.hkv, c.dh}),
        Upload(v, {c.b, c.t, c.hkv, c.dh}), {.window = c.window, .scale = c.scale});
    ref::Vec want_out, want_lse;
    ref::Attention(ToF64(q), ToF64(k), ToF64(v), Dims(c), &want_out, &want_lse);
    EXPECT_TRUE(NearMax(Download(out), want_out, tol)) << "out";
    EXPECT_TRUE(NearMax(Download(lse), want_lse, tol)) << "lse";
  }

  // dq, dk, dv against float64 central differences of L = Σ dout ⊙ Attention(q, k, v); the
  // saved out and lse are the reference's, rounded to float, so only the backward is tested.
  void CheckBackward(const Case& c) {
    SCOPED_TRACE(Describe(c));
    std::vector<float> q, k, v;
    MakeInputs(c, 1.0f, &q, &k, &v);
    const std::vector<float> dout = Normal(c.b * c.t * c.h * c.dh);
    ref::Vec q64 = ToF64(q), k64 = ToF64(k), v64 = ToF64(v);
    const ref::Vec dout64 = ToF64(dout);
    ref::Vec out, lse;
    ref::Attention(q64, k64, v64, Dims(c), &out, &lse);
    auto loss = [&] {
      ref::Vec o, l;
      ref::Attention(q64, k64, v64, Dims(c), &o, &l);
      return ref::Dot(dout64, o);
    };
    const ref::Vec want_dq = ref::NumericalGradient(loss, &q64);
    const ref::Vec want_dk = ref::NumericalGradient(loss, &k64);
    const ref::Vec want_dv = ref::NumericalGradient(loss, &v64);

    Tensor dq = Nans({c.b, c.t, c.h, c.dh});
    Tensor dk = Nans({c.b, c.t, c.hkv, c.dh});
    Tensor dv = Nans({c.b, c.t, c.hkv, c.dh});
    backend().AttentionBackward(
        dq, dk, dv, Upload(dout, {c.b, c.t, c.h, c.dh}), Upload(q, {c.b, c.t, c.h, c.dh}),
        Upload(k, {c.b, c.t, c.hkv, c.dh}), Upload(v, {c.b, c.t, c.hkv, c.dh}),
        Upload(ToF32(out), {c.b, c.t, c.h, c.dh}), Upload(ToF32(lse), {c.b, c.h, c.t}),
        {.window = c.window, .scale = c.scale});
    EXPECT_TRUE(NearMax(Download(dq), want_dq, kBackwardTol)) << "dq";
    EXPECT_TRUE(NearMax(Download(dk), want_dk, kBackwardTol)) << "dk";
    EXPECT_TRUE(NearMax(Download(dv), want_dv, kBackwardTol)) << "dv";
  }
};
FB_INSTANTIATE_BACKEND_TEST_SUITE(AttentionTest);

TEST_P(AttentionTest, Forward_TEqualsOne_MatchesReference) {
  for (const Case& c : {Case{1, 1, 2, 1, 8}, Case{3, 1, 4, 2, 10}, Case{1, 1, 6, 6, 16, 5}}) {
    CheckForward(c, kForwardTol);
  }
}

TEST_P(AttentionTest, Forward_TEqualsOne_ReturnsTheOnlyValueRow) {
  // One key: softmax weight 1, so out[h] = v[h / (H / Hkv)] and lse = scale · q·k.
  const int64_t h = 4, hkv = 2, dh = 8;
  const std::vector<float> q = Normal(h * dh), k = Normal(hkv * dh), v = Normal(hkv * dh);
  Tensor out = Nans({1, 1, h, dh});
  Tensor lse = Nans({1, h, 1});
  backend().AttentionForward(out, lse, Upload(q, {1, 1, h, dh}), Upload(k, {1, 1, hkv, dh}),
                             Upload(v, {1, 1, hkv, dh}), {});
  ref::Vec want_out, want_lse(h, 0.0);
  for (int64_t hi = 0; hi < h; ++hi) {
    const int64_t g = hi / (h / hkv);
    for (int64_t j = 0; j < dh; ++j) {
      want_out.push_back(v[g * dh + j]);
      want_lse[hi] +=
          q[hi * dh + j] * static_cast<double>(k[g * dh + j]) / std::sqrt(static_cast<double>(dh));
    }
  }
  EXPECT_TRUE(NearMax(Download(out), want_out, kForwardTol)) << "out";
  EXPECT_TRUE(NearMax(Download(lse), want_lse, kForwardTol)) << "lse";
}

TEST_P(AttentionTest, Forward_CausalGqaShapes_MatchesReference) {
  for (const Case& c : {Case{1, 7, 2, 2, 8}, Case{2, 33, 4, 2, 10}, Case{1, 7, 6, 1, 16},
                        Case{2, 7, 4, 4, 10}, Case{1, 33, 6, 1, 8}}) {
    CheckForward(c, kForwardTol);
  }
}

// The head dims of production configs (the default is 96), where the CUDA kernels switch to
// their wider variants; T = 65 spans more than one tile of keys.
TEST_P(AttentionTest, Forward_ProductionHeadDims_MatchesReference) {
  for (const int64_t dh : {64, 96, 128, 256}) {
    CheckForward(Case{1, 65, 4, 2, dh}, kForwardTol);
    CheckForward(Case{1, 65, 2, 1, dh, 16}, kForwardTol);
  }
}

TEST_P(AttentionTest, Backward_ProductionHeadDims_MatchesFiniteDifferences) {
  for (const int64_t dh : {64, 96, 128, 256}) CheckBackward(Case{1, 9, 2, 1, dh, 4});
}

TEST_P(AttentionTest, Forward_WindowSmallerThanT_MatchesReference) {
  for (const Case& c : {Case{2, 33, 4, 2, 10, 5}, Case{1, 7, 6, 1, 16, 3}, Case{1, 33, 2, 2, 8, 5},
                        Case{1, 7, 4, 2, 8, 2}}) {
    CheckForward(c, kForwardTol);
  }
}

TEST_P(AttentionTest, Forward_WindowOfOne_AttendsOnlyToItself) {
  // W = 1: key s is visible iff t - 1 < s <= t, i.e. s == t, so out[t, h] = v[t, h / (H/Hkv)].
  const Case c{1, 7, 4, 2, 8, 1};
  CheckForward(c, kForwardTol);
  std::vector<float> q, k, v;
  MakeInputs(c, 1.0f, &q, &k, &v);
  Tensor out = Nans({c.b, c.t, c.h, c.dh});
  Tensor lse = Nans({c.b, c.h, c.t});
  backend().AttentionForward(out, lse, Upload(q, {c.b, c.t, c.h, c.dh}),
                             Upload(k, {c.b, c.t, c.hkv, c.dh}), Upload(v, {c.b, c.t, c.hkv, c.dh}),
                             {.window = 1});
  ref::Vec want;
  for (int64_t t = 0; t < c.t; ++t) {
    for (int64_t h = 0; h < c.h; ++h) {
      for (int64_t j = 0; j < c.dh; ++j)
        want.push_back(v[(t * c.hkv + h / (c.h / c.hkv)) * c.dh + j]);
    }
  }
  EXPECT_TRUE(NearMax(Download(out), want, kForwardTol));
}

TEST_P(AttentionTest, Forward_WindowAtLeastT_EqualsPlainCausal) {
  for (const Case& c : {Case{1, 7, 4, 2, 8, 7}, Case{1, 7, 4, 2, 8, 100}}) {
    CheckForward(c, kForwardTol);
  }
}

TEST_P(AttentionTest, Forward_CustomScale_MatchesReference) {
  for (const Case& c : {Case{1, 7, 4, 2, 10, 0, 0.37f}, Case{2, 33, 2, 1, 8, 5, 1.0f}}) {
    CheckForward(c, kForwardTol);
  }
}

TEST_P(AttentionTest, Forward_LargeScores_StaysFiniteAndMatchesReference) {
  // q ~ N(0, 50²), Dh = 16: scaled scores ~ N(0, 50²) reach ±150, past exp's float range
  // (88) unless the row maximum is subtracted.
  for (const Case& c : {Case{1, 33, 4, 2, 16}, Case{1, 33, 4, 2, 16, 5}}) {
    CheckForward(c, kLargeScoreTol, /*q_stddev=*/50.0f);
  }
}

TEST_P(AttentionTest, Forward_LongerSequence_MatchesReference) {
  // T = 257 crosses any 64/128-row tiling; forward only (finite differences would be slow).
  for (const Case& c :
       {Case{1, 257, 4, 2, 16}, Case{1, 257, 4, 2, 16, 64}, Case{2, 130, 2, 1, 10, 100}}) {
    CheckForward(c, kForwardTol);
  }
}

TEST_P(AttentionTest, Backward_TEqualsOne_MatchesFiniteDifferences) {
  for (const Case& c : {Case{1, 1, 2, 1, 8}, Case{2, 1, 4, 4, 10}}) CheckBackward(c);
}

TEST_P(AttentionTest, Backward_CausalGqaShapes_MatchesFiniteDifferences) {
  for (const Case& c :
       {Case{1, 7, 4, 2, 8}, Case{2, 7, 2, 2, 10}, Case{1, 7, 6, 1, 16}, Case{1, 33, 2, 1, 8}}) {
    CheckBackward(c);
  }
}

TEST_P(AttentionTest, Backward_WindowSmallerThanT_MatchesFiniteDifferences) {
  for (const Case& c :
       {Case{1, 33, 4, 2, 10, 5}, Case{2, 7, 6, 1, 8, 3}, Case{1, 7, 2, 2, 16, 1}}) {
    CheckBackward(c);
  }
}

TEST_P(AttentionTest, Backward_CustomScale_MatchesFiniteDifferences) {
  CheckBackward({1, 7, 4, 2, 10, 0, 0.37f});
}

TEST_P(AttentionTest, Cpu_SameInputsTwice_GiveBitwiseIdenticalResults) {
  // backend.h: on the CPU a given configuration is bitwise reproducible run to run.
  if (device() != Device::kCpu) GTEST_SKIP() << "determinism is promised for the CPU only";
  const Case c{2, 33, 4, 2, 10, 5};
  std::vector<float> q, k, v;
  MakeInputs(c, 1.0f, &q, &k, &v);
  const std::vector<float> dout = Normal(c.b * c.t * c.h * c.dh);
  Tensor tq = Upload(q, {c.b, c.t, c.h, c.dh}), tk = Upload(k, {c.b, c.t, c.hkv, c.dh}),
         tv = Upload(v, {c.b, c.t, c.hkv, c.dh}), tdout = Upload(dout, {c.b, c.t, c.h, c.dh});
  std::vector<std::vector<float>> runs[2];
  for (auto& run : runs) {
    Tensor out = Nans({c.b, c.t, c.h, c.dh}), lse = Nans({c.b, c.h, c.t});
    Tensor dq = Nans({c.b, c.t, c.h, c.dh}), dk = Nans({c.b, c.t, c.hkv, c.dh}),
           dv = Nans({c.b, c.t, c.hkv, c.dh});
    backend().AttentionForward(out, lse, tq, tk, tv, {.window = c.window});
    backend().AttentionBackward(dq, dk, dv, tdout, tq, tk, tv, out, lse, {.window = c.window});
    run = {Download(out), Download(lse), Download(dq), Download(dk), Download(dv)};
  }
  for (size_t i = 0; i < runs[0].size(); ++i) {
    EXPECT_TRUE(BitwiseEqual(runs[1][i], runs[0][i])) << "output " << i;
  }
}

}  // namespace
}  // namespace fullband::ops::test

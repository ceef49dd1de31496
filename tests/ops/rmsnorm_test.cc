// RmsNormForward/Backward against the float64 reference: out and rstd for several (N, D)
// including the QK-norm shape (rows, Dh) and D = 1536; eps inside the square root; out
// aliasing x; the backward by finite differences, with dx overwritten (may alias dout) and
// dgain accumulated (Note [Gradient accumulation]).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "tests/ops/backend_fixture.h"
#include "tests/ops/reference.h"

namespace fullband::ops::test {
namespace {

// mean(x²) over D ≤ 1536 float32 terms (~√D·ε typical) then rsqrt (a few ulp): ≲ 2e-6.
constexpr double kForwardTol = 1e-5;
// dx needs Σ_j dout·gain·x over D and dgain Σ over N rows, then a subtraction: relative 1e-4
// for reductions over ≤ a few hundred terms.
constexpr double kBackwardTol = 1e-4;

struct Case {
  int64_t n, d;
};

class RmsNormTest : public BackendTest {
 protected:
  // Runs forward and compares out and rstd; `alias` writes out over x.
  void CheckForward(Case c, float eps, bool alias, float x_stddev = 1.0f) {
    SCOPED_TRACE(::testing::Message()
                 << "N=" << c.n << " D=" << c.d << " eps=" << eps << " alias=" << alias);
    const std::vector<float> x = Normal(c.n * c.d, x_stddev);
    const std::vector<float> gain = Uniform(c.d, 0.5f, 1.5f);
    Tensor tx = Upload(x, {c.n, c.d});
    Tensor out = alias ? tx : Nans({c.n, c.d});
    Tensor rstd = Nans({c.n});
    backend().RmsNormForward(out, rstd, tx, Upload(gain, {c.d}), eps);

    ref::Vec want_out, want_rstd;
    ref::RmsNorm(ToF64(x), ToF64(gain), c.n, c.d, eps, &want_out, &want_rstd);
    EXPECT_TRUE(NearMax(Download(out), want_out, kForwardTol)) << "out";
    EXPECT_TRUE(NearEach(Download(rstd), want_rstd, kForwardTol, 0)) << "rstd";
  }

  // Runs backward with random dout and compares dx with dL/dx and dgain with prefill + dL/dgain
  // for L = Σ dout ⊙ RmsNorm(x; gain), by float64 central differences.
  void CheckBackward(Case c, float eps, bool alias) {
    SCOPED_TRACE(::testing::Message()
                 << "N=" << c.n << " D=" << c.d << " eps=" << eps << " alias=" << alias);
    const std::vector<float> x = Normal(c.n * c.d);
    const std::vector<float> gain = Uniform(c.d, 0.5f, 1.5f);
    const std::vector<float> dout = Normal(c.n * c.d);
    const std::vector<float> dgain_prefill = Normal(c.d);

    ref::Vec x64 = ToF64(x), gain64 = ToF64(gain);
    const ref::Vec dout64 = ToF64(dout);
    ref::Vec out, rstd;
    ref::RmsNorm(x64, gain64, c.n, c.d, eps, &out, &rstd);
    auto loss = [&] {
      ref::Vec o, r;
      ref::RmsNorm(x64, gain64, c.n, c.d, eps, &o, &r);
      return ref::Dot(dout64, o);
    };
    const ref::Vec want_dx = ref::NumericalGradient(loss, &x64);
    const ref::Vec want_dgain = ref::NumericalGradient(loss, &gain64);

    Tensor tdout = Upload(dout, {c.n, c.d});
    Tensor dx = alias ? tdout : Nans({c.n, c.d});
    Tensor dgain = Upload(dgain_prefill, {c.d});
    backend().RmsNormBackward(dx, dgain, tdout, Upload(x, {c.n, c.d}), Upload(gain, {c.d}),
                              Upload(ToF32(rstd), {c.n}));
    EXPECT_TRUE(NearMax(Download(dx), want_dx, kBackwardTol)) << "dx";
    EXPECT_TRUE(NearMax(Download(dgain), Plus(ToF64(dgain_prefill), want_dgain), kBackwardTol))
        << "dgain = prefill + gradient";
  }
};
FB_INSTANTIATE_BACKEND_TEST_SUITE(RmsNormTest);

TEST_P(RmsNormTest, Forward_VariousShapes_MatchesReference) {
  for (const Case c :
       {Case{1, 24}, Case{7, 40}, Case{33, 100}, Case{12, 10}, Case{5, 16}, Case{64, 1536}}) {
    CheckForward(c, 1e-6f, /*alias=*/false);
  }
}

TEST_P(RmsNormTest, Forward_LargeEps_AddsEpsInsideTheSquareRoot) {
  // With mean(x²) ≈ 0.09 an eps of 0.5 dominates: an eps outside the root would be far off.
  for (const Case c : {Case{7, 40}, Case{3, 10}}) CheckForward(c, 0.5f, false, 0.3f);
}

TEST_P(RmsNormTest, Forward_OutAliasesX_MatchesReference) {
  for (const Case c : {Case{7, 40}, Case{33, 100}}) CheckForward(c, 1e-6f, /*alias=*/true);
}

TEST_P(RmsNormTest, Backward_VariousShapes_MatchesFiniteDifferences) {
  for (const Case c : {Case{1, 24}, Case{7, 100}, Case{33, 40}, Case{6, 10}}) {
    CheckBackward(c, 1e-6f, /*alias=*/false);
  }
}

// More than 128 rows: the gain gradient's sum over rows runs in several chunks (on CUDA, blocks
// that combine with atomicAdd).
TEST_P(RmsNormTest, Backward_ManyRows_SumsTheGainGradientOverEveryChunk) {
  for (const Case c : {Case{129, 16}, Case{300, 8}}) CheckBackward(c, 1e-6f, /*alias=*/false);
}

TEST_P(RmsNormTest, Backward_LargeEps_MatchesFiniteDifferences) {
  CheckBackward({7, 24}, 0.5f, /*alias=*/false);
}

TEST_P(RmsNormTest, Backward_DxAliasesDout_MatchesFiniteDifferences) {
  for (const Case c : {Case{7, 40}, Case{33, 24}}) CheckBackward(c, 1e-6f, /*alias=*/true);
}

}  // namespace
}  // namespace fullband::ops::test

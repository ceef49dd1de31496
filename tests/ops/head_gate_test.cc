// HeadGateForward/Backward against the float64 reference: out[n,h,:] = x[n,h,:]·sigmoid(gate[n,h])
// for (B, T, H, Dh) with gate (B, T, H) and for (N, H, Dh) with gate (N, H), gates up to ±30,
// out aliasing x; the backward by finite differences with dx and dgate overwritten.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "tests/ops/backend_fixture.h"
#include "tests/ops/reference.h"

namespace fullband::ops::test {
namespace {

// One sigmoid (exp: a few ulp) and one product per element: ≲ 1e-6 relative per element;
// absolute 1e-6 lets a sigmoid written as 1 - σ(-g) or via tanh lose its ≲ ε tails.
constexpr double kForwardRtol = 2e-6;
constexpr double kForwardAtol = 1e-6;
// dgate sums dout·x over Dh ≤ 16 terms times σ(1-σ); dx is elementwise: 2e-5 of the largest.
constexpr double kBackwardTol = 2e-5;

struct Case {
  int64_t b, t, h, dh;
};

class HeadGateTest : public BackendTest {
 protected:
  // Gate logits: mostly N(0, 2²), with a few saturated values.
  std::vector<float> Gates(int64_t n) {
    std::vector<float> gate = Normal(n, 2.0f);
    if (n > 2) {
      gate[1] = 30.0f;
      gate[2] = -30.0f;
    }
    return gate;
  }

  // rank4: x (B, T, H, Dh) and gate (B, T, H); otherwise x (B·T, H, Dh) and gate (B·T, H).
  void CheckForward(const Case& c, bool rank4, bool alias) {
    SCOPED_TRACE(::testing::Message() << "B=" << c.b << " T=" << c.t << " H=" << c.h << " Dh="
                                      << c.dh << " rank4=" << rank4 << " alias=" << alias);
    const int64_t n = c.b * c.t;
    const Shape xs = rank4 ? Shape{c.b, c.t, c.h, c.dh} : Shape{n, c.h, c.dh};
    const Shape gs = rank4 ? Shape{c.b, c.t, c.h} : Shape{n, c.h};
    const std::vector<float> x = Normal(xs.numel());
    const std::vector<float> gate = Gates(gs.numel());
    Tensor tx = Upload(x, xs);
    Tensor out = alias ? tx : Nans(xs);
    backend().HeadGateForward(out, tx, Upload(gate, gs));
    EXPECT_TRUE(NearEach(Download(out), ref::HeadGate(ToF64(x), ToF64(gate), n, c.h, c.dh),
                         kForwardRtol, kForwardAtol));
  }

  void CheckBackward(const Case& c, bool rank4) {
    SCOPED_TRACE(::testing::Message() << "B=" << c.b << " T=" << c.t << " H=" << c.h
                                      << " Dh=" << c.dh << " rank4=" << rank4);
    const int64_t n = c.b * c.t;
    const Shape xs = rank4 ? Shape{c.b, c.t, c.h, c.dh} : Shape{n, c.h, c.dh};
    const Shape gs = rank4 ? Shape{c.b, c.t, c.h} : Shape{n, c.h};
    const std::vector<float> x = Normal(xs.numel());
    const std::vector<float> gate = Gates(gs.numel());
    const std::vector<float> dout = Normal(xs.numel());
    ref::Vec x64 = ToF64(x), gate64 = ToF64(gate);
    const ref::Vec dout64 = ToF64(dout);
    auto loss = [&] { return ref::Dot(dout64, ref::HeadGate(x64, gate64, n, c.h, c.dh)); };
    const ref::Vec want_dx = ref::NumericalGradient(loss, &x64);
    const ref::Vec want_dgate = ref::NumericalGradient(loss, &gate64);

    Tensor dx = Nans(xs), dgate = Nans(gs);
    backend().HeadGateBackward(dx, dgate, Upload(dout, xs), Upload(x, xs), Upload(gate, gs));
    EXPECT_TRUE(NearMax(Download(dx), want_dx, kBackwardTol)) << "dx";
    EXPECT_TRUE(NearMax(Download(dgate), want_dgate, kBackwardTol)) << "dgate";
  }
};
FB_INSTANTIATE_BACKEND_TEST_SUITE(HeadGateTest);

TEST_P(HeadGateTest, Forward_BTHDhLayout_MatchesReference) {
  for (const Case& c : {Case{1, 1, 3, 8}, Case{2, 7, 4, 10}, Case{1, 33, 6, 16}}) {
    CheckForward(c, /*rank4=*/true, /*alias=*/false);
  }
}

// The paper's 1B model: 16 heads of Dh = 96.
TEST_P(HeadGateTest, Forward_OneBillionConfigHeads_MatchesReference) {
  CheckForward(Case{1, 9, 16, 96}, /*rank4=*/true, /*alias=*/false);
}

TEST_P(HeadGateTest, Forward_NHDhLayout_MatchesReference) {
  for (const Case& c : {Case{1, 7, 4, 10}, Case{3, 11, 2, 8}}) {
    CheckForward(c, /*rank4=*/false, /*alias=*/false);
  }
}

TEST_P(HeadGateTest, Forward_OutAliasesX_MatchesReference) {
  CheckForward({2, 7, 4, 10}, /*rank4=*/true, /*alias=*/true);
}

TEST_P(HeadGateTest, Backward_VariousShapes_MatchesFiniteDifferences) {
  for (const Case& c : {Case{1, 1, 3, 8}, Case{2, 7, 4, 10}, Case{1, 33, 2, 16}}) {
    CheckBackward(c, /*rank4=*/true);
  }
  CheckBackward({3, 5, 2, 8}, /*rank4=*/false);
}

}  // namespace
}  // namespace fullband::ops::test

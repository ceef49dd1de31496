// ShiftRightForward/Backward against the float64 reference: out[b, 0] = 0, out[b, t] =
// x[b, t-1] within each batch item (nothing crosses from item b-1), T = 1, 7, 33; outputs
// start as NaN so every element must be written; the backward by finite differences.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "tests/ops/backend_fixture.h"
#include "tests/ops/reference.h"

namespace fullband::ops::test {
namespace {

// Pure data movement: exact in float32; the finite differences of L (a float64 sum of ≤ 1e4
// terms, divided by 2h = 2e-6) carry ≲ 1e-8 relative noise.
constexpr double kBackwardTol = 1e-6;

struct Case {
  int64_t b, t, d;
};

class ShiftTest : public BackendTest {};
FB_INSTANTIATE_BACKEND_TEST_SUITE(ShiftTest);

TEST_P(ShiftTest, Forward_VariousShapes_ShiftsWithinEachSequence) {
  for (const Case c : {Case{1, 1, 40}, Case{2, 7, 24}, Case{3, 33, 100}, Case{2, 1, 10}}) {
    SCOPED_TRACE(::testing::Message() << "B=" << c.b << " T=" << c.t << " D=" << c.d);
    const std::vector<float> x = Normal(c.b * c.t * c.d);
    Tensor out = Nans({c.b, c.t, c.d});
    backend().ShiftRightForward(out, Upload(x, {c.b, c.t, c.d}));
    EXPECT_TRUE(BitwiseEqual(Download(out), ToF32(ref::ShiftRight(ToF64(x), c.b, c.t, c.d))));
  }
}

// The paper's 1B width (D = 1536) on two sequences of 2,048 positions; the backward is the
// shift to the left, checked exactly (it moves data only).
TEST_P(ShiftTest, OneBillionConfigShape_ForwardAndBackwardAreExact) {
  const int64_t b = 2, t = 2048, d = 1536;
  const std::vector<float> x = Normal(b * t * d);
  Tensor out = Nans({b, t, d});
  backend().ShiftRightForward(out, Upload(x, {b, t, d}));
  EXPECT_TRUE(BitwiseEqual(Download(out), ToF32(ref::ShiftRight(ToF64(x), b, t, d))));
  Tensor dx = Nans({b, t, d});
  backend().ShiftRightBackward(dx, Upload(x, {b, t, d}));
  std::vector<float> want(x.size(), 0.0f);  // dx[b, t] = dout[b, t + 1], 0 at t = T − 1
  for (int64_t i = 0; i < b; ++i) {
    for (int64_t p = 0; p + 1 < t; ++p) {
      std::copy_n(x.begin() + (i * t + p + 1) * d, d, want.begin() + (i * t + p) * d);
    }
  }
  EXPECT_TRUE(BitwiseEqual(Download(dx), want));
}

TEST_P(ShiftTest, Backward_VariousShapes_MatchesFiniteDifferences) {
  for (const Case c : {Case{1, 1, 40}, Case{2, 7, 24}, Case{3, 33, 24}, Case{2, 1, 10}}) {
    SCOPED_TRACE(::testing::Message() << "B=" << c.b << " T=" << c.t << " D=" << c.d);
    const std::vector<float> dout = Normal(c.b * c.t * c.d);
    ref::Vec x64 = ToF64(Normal(c.b * c.t * c.d));
    const ref::Vec dout64 = ToF64(dout);
    const ref::Vec want = ref::NumericalGradient(
        [&] { return ref::Dot(dout64, ref::ShiftRight(x64, c.b, c.t, c.d)); }, &x64);
    Tensor dx = Nans({c.b, c.t, c.d});
    backend().ShiftRightBackward(dx, Upload(dout, {c.b, c.t, c.d}));
    EXPECT_TRUE(NearMax(Download(dx), want, kBackwardTol));
  }
}

}  // namespace
}  // namespace fullband::ops::test

// RopeForward/Backward against the float64 reference: rotate-half pairing (i, i + Dh/2), angle
// t·theta^(-2i/Dh) with positions restarting at 0 in every batch item, several theta and Dh
// (8, 10, 16), a long sequence, out aliasing x; the backward (the inverse rotation) by finite
// differences, dx overwritten or aliasing dout.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "tests/ops/backend_fixture.h"
#include "tests/ops/reference.h"

namespace fullband::ops::test {
namespace {

// The angle t·θ^(-2i/Dh) carries ~t·ε radians of float32 rounding (t ≤ 33: ≲ 4e-6), plus a
// few ulp from sin/cos and the rotation.
constexpr double kTol = 2e-5;
// T = 2048: the angle's float32 rounding grows to ~2048·ε ≈ 2.5e-4 radians.
constexpr double kLongTol = 1e-3;

struct Case {
  int64_t b, t, nh, dh;
  float theta;
};

class RopeTest : public BackendTest {
 protected:
  void CheckForward(const Case& c, bool alias, double tol) {
    SCOPED_TRACE(::testing::Message() << "B=" << c.b << " T=" << c.t << " nH=" << c.nh << " Dh="
                                      << c.dh << " theta=" << c.theta << " alias=" << alias);
    const Shape shape{c.b, c.t, c.nh, c.dh};
    const std::vector<float> x = Normal(shape.numel());
    Tensor tx = Upload(x, shape);
    Tensor out = alias ? tx : Nans(shape);
    backend().RopeForward(out, tx, c.theta);
    EXPECT_TRUE(NearMax(Download(out), ref::Rope(ToF64(x), c.b, c.t, c.nh, c.dh, c.theta), tol));
  }

  void CheckBackward(const Case& c, bool alias) {
    SCOPED_TRACE(::testing::Message() << "B=" << c.b << " T=" << c.t << " nH=" << c.nh << " Dh="
                                      << c.dh << " theta=" << c.theta << " alias=" << alias);
    const Shape shape{c.b, c.t, c.nh, c.dh};
    const std::vector<float> x = Normal(shape.numel());
    const std::vector<float> dout = Normal(shape.numel());
    ref::Vec x64 = ToF64(x);
    const ref::Vec dout64 = ToF64(dout);
    const ref::Vec want = ref::NumericalGradient(
        [&] { return ref::Dot(dout64, ref::Rope(x64, c.b, c.t, c.nh, c.dh, c.theta)); }, &x64);

    Tensor tdout = Upload(dout, shape);
    Tensor dx = alias ? tdout : Nans(shape);
    backend().RopeBackward(dx, tdout, c.theta);
    EXPECT_TRUE(NearMax(Download(dx), want, kTol));
  }
};
FB_INSTANTIATE_BACKEND_TEST_SUITE(RopeTest);

TEST_P(RopeTest, Forward_VariousShapes_MatchesReference) {
  for (const Case& c :
       {Case{1, 1, 1, 8, 10000.0f}, Case{2, 7, 3, 10, 10000.0f}, Case{1, 33, 2, 16, 10000.0f},
        Case{3, 5, 4, 8, 500000.0f}, Case{2, 33, 1, 10, 100.0f}}) {
    CheckForward(c, /*alias=*/false, kTol);
  }
}

// The paper's 1B model: 16 query heads of Dh = 96, theta 10000, over 65 positions.
TEST_P(RopeTest, Forward_OneBillionConfigHeads_MatchesReference) {
  CheckForward(Case{1, 65, 16, 96, 10000.0f}, /*alias=*/false, kTol);
}

TEST_P(RopeTest, Forward_OutAliasesX_MatchesReference) {
  for (const Case& c : {Case{2, 7, 3, 10, 10000.0f}, Case{1, 33, 2, 16, 10000.0f}}) {
    CheckForward(c, /*alias=*/true, kTol);
  }
}

TEST_P(RopeTest, Forward_LongSequence_MatchesReference) {
  CheckForward({1, 2048, 1, 16, 10000.0f}, /*alias=*/false, kLongTol);
}

TEST_P(RopeTest, Forward_PositionZero_IsIdentityInEveryBatchItem) {
  // Positions run 0..T-1 within each batch item: row t = 0 of item b is not rotated at all.
  const int64_t b = 3, t = 4, nh = 2, dh = 10;
  const std::vector<float> x = Normal(b * t * nh * dh);
  Tensor out = Nans({b, t, nh, dh});
  backend().RopeForward(out, Upload(x, {b, t, nh, dh}), 10000.0f);
  const std::vector<float> got = Download(out);
  std::vector<float> got_t0, want_t0;
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t j = 0; j < nh * dh; ++j) {
      got_t0.push_back(got[bi * t * nh * dh + j]);
      want_t0.push_back(x[bi * t * nh * dh + j]);
    }
  }
  EXPECT_TRUE(NearEach(got_t0, ToF64(want_t0), 1e-6, 0));  // cos 0 = 1, sin 0 = 0
}

TEST_P(RopeTest, Backward_VariousShapes_MatchesFiniteDifferences) {
  for (const Case& c : {Case{1, 1, 1, 8, 10000.0f}, Case{2, 7, 3, 10, 10000.0f},
                        Case{1, 33, 2, 16, 10000.0f}, Case{2, 5, 1, 8, 100.0f}}) {
    CheckBackward(c, /*alias=*/false);
  }
}

TEST_P(RopeTest, Backward_DxAliasesDout_MatchesFiniteDifferences) {
  CheckBackward({2, 7, 3, 10, 10000.0f}, /*alias=*/true);
}

}  // namespace
}  // namespace fullband::ops::test

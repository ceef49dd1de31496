// ResidualForward/Backward against the float64 reference: x += scale·branch in place for
// several (N, D) and scales (1/sqrt(L), 1, 0, negative); the backward writes dbranch =
// scale·dx over NaN (overwritten), leaves dx untouched, and both agree with finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "tests/ops/backend_fixture.h"
#include "tests/ops/reference.h"

namespace fullband::ops::test {
namespace {

// x + s·b rounds at most twice: |error| ≤ ε(|x| + |s·b|), ≲ 2ε of the largest output.
constexpr double kForwardTol = 1e-6;
// dbranch = s·dx is one rounding; finite differences of a linear map add ~1e-10.
constexpr double kBackwardTol = 1e-6;

struct Case {
  int64_t n, d;
};

class ResidualTest : public BackendTest {};
FB_INSTANTIATE_BACKEND_TEST_SUITE(ResidualTest);

TEST_P(ResidualTest, Forward_VariousScales_AddsScaledBranchInPlace) {
  for (const Case c : {Case{1, 24}, Case{7, 40}, Case{33, 100}}) {
    for (float scale : {1.0f / std::sqrt(24.0f), 1.0f, 0.0f, -0.5f}) {
      SCOPED_TRACE(::testing::Message() << "N=" << c.n << " D=" << c.d << " scale=" << scale);
      const std::vector<float> x = Normal(c.n * c.d), branch = Normal(c.n * c.d);
      Tensor tx = Upload(x, {c.n, c.d});
      backend().ResidualForward(tx, Upload(branch, {c.n, c.d}), scale);
      EXPECT_TRUE(
          NearMax(Download(tx), ref::Residual(ToF64(x), ToF64(branch), scale), kForwardTol));
    }
  }
}

// The paper's 1B width (D = 1536) over 512 tokens, with its depth scaling 1/sqrt(24); the
// backward against its closed form dbranch = scale·dx (finite differences would take minutes).
TEST_P(ResidualTest, OneBillionConfigWidth_ForwardAndBackwardMatchReference) {
  const int64_t n = 512, d = 1536;
  const float scale = 1.0f / std::sqrt(24.0f);
  const std::vector<float> x = Normal(n * d), branch = Normal(n * d), dx = Normal(n * d);
  Tensor tx = Upload(x, {n, d});
  backend().ResidualForward(tx, Upload(branch, {n, d}), scale);
  EXPECT_TRUE(NearMax(Download(tx), ref::Residual(ToF64(x), ToF64(branch), scale), kForwardTol));
  Tensor dbranch = Nans({n, d});
  backend().ResidualBackward(dbranch, Upload(dx, {n, d}), scale);
  ref::Vec want(dx.size());
  for (size_t i = 0; i < dx.size(); ++i) want[i] = scale * static_cast<double>(dx[i]);
  EXPECT_TRUE(NearMax(Download(dbranch), want, kBackwardTol));
}

TEST_P(ResidualTest, Backward_OverwritesDbranchAndLeavesDxUnchanged) {
  for (const Case c : {Case{1, 24}, Case{7, 40}, Case{33, 24}, Case{5, 100}}) {
    for (float scale : {1.0f / std::sqrt(24.0f), -0.5f}) {
      SCOPED_TRACE(::testing::Message() << "N=" << c.n << " D=" << c.d << " scale=" << scale);
      const std::vector<float> dx = Normal(c.n * c.d);  // upstream gradient of the new x
      ref::Vec x64 = ToF64(Normal(c.n * c.d)), branch64 = ToF64(Normal(c.n * c.d));
      const ref::Vec dx64 = ToF64(dx);
      auto loss = [&] { return ref::Dot(dx64, ref::Residual(x64, branch64, scale)); };
      const ref::Vec want_dbranch = ref::NumericalGradient(loss, &branch64);
      const ref::Vec want_dx = ref::NumericalGradient(loss, &x64);

      Tensor tdx = Upload(dx, {c.n, c.d});
      Tensor dbranch = Nans({c.n, c.d});
      backend().ResidualBackward(dbranch, tdx, scale);
      EXPECT_TRUE(NearMax(Download(dbranch), want_dbranch, kBackwardTol)) << "dbranch";
      EXPECT_TRUE(BitwiseEqual(Download(tdx), dx)) << "dx must flow on unchanged";
      EXPECT_TRUE(NearMax(Download(tdx), want_dx, kBackwardTol)) << "dx is the gradient of x";
    }
  }
}

}  // namespace
}  // namespace fullband::ops::test

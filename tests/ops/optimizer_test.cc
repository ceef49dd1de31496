// AdamWStep, SumSquares and Scale against the float64 reference: several consecutive AdamW
// steps (PyTorch order: decoupled weight decay first, grad_scale applied to the gradient,
// bias correction from options.step) checking param, m and v after each; SumSquares
// accumulated in float64; Scale as one float32 multiply.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "tests/ops/backend_fixture.h"
#include "tests/ops/reference.h"

namespace fullband::ops::test {
namespace {

// Each step rounds p ~3 times (decay, update, subtraction), ≲ 2ε|p| per step; after 5 steps
// ≲ 1e-6 of the largest |p|.
constexpr double kParamTol = 5e-6;
// m = β1·m + (1-β1)·g can cancel towards 0, so m is judged against its largest entry; v is a
// sum of positive terms and holds a per-element relative bound. A few roundings per step.
constexpr double kMomentTol = 1e-5;

ref::AdamWParams ToRef(const AdamWOptions& o) {
  // The float options widened exactly, so the reference sees the same numbers.
  return {.lr = o.lr,
          .beta1 = o.beta1,
          .beta2 = o.beta2,
          .eps = o.eps,
          .weight_decay = o.weight_decay,
          .grad_scale = o.grad_scale,
          .step = o.step};
}

class OptimizerTest : public BackendTest {
 protected:
  // Runs `steps` AdamW calls from options.step on, each with a fresh gradient, comparing the
  // state after every call with the float64 reference run from the same starting floats.
  void CheckAdamW(int64_t n, AdamWOptions options, int steps, const std::vector<float>& m0,
                  const std::vector<float>& v0) {
    const std::vector<float> p0 = Normal(n);
    Tensor param = Upload(p0, {n}), m = Upload(m0, {n}), v = Upload(v0, {n});
    ref::Vec want_p = ToF64(p0), want_m = ToF64(m0), want_v = ToF64(v0);
    for (int s = 0; s < steps; ++s) {
      SCOPED_TRACE(::testing::Message() << "n=" << n << " step=" << options.step);
      const std::vector<float> grad = Normal(n, 2.0f);
      backend().AdamWStep(param, Upload(grad, {n}), m, v, options);
      ref::AdamWStep(&want_p, ToF64(grad), &want_m, &want_v, ToRef(options));
      EXPECT_TRUE(NearMax(Download(param), want_p, kParamTol)) << "param";
      EXPECT_TRUE(NearMax(Download(m), want_m, kMomentTol)) << "m";
      EXPECT_TRUE(NearEach(Download(v), want_v, kMomentTol, 0)) << "v";
      ++options.step;
    }
  }
};
FB_INSTANTIATE_BACKEND_TEST_SUITE(OptimizerTest);

TEST_P(OptimizerTest, AdamW_SeveralStepsWithWeightDecayAndGradScale_MatchesReference) {
  const int64_t n = 1031;
  CheckAdamW(n,
             {.lr = 1e-2f,
              .beta1 = 0.9f,
              .beta2 = 0.95f,
              .eps = 1e-8f,
              .weight_decay = 0.1f,
              .step = 1,
              .grad_scale = 0.5f},
             5, std::vector<float>(n, 0.0f), std::vector<float>(n, 0.0f));
}

TEST_P(OptimizerTest, AdamW_LaterStepNumber_UsesItForBiasCorrection) {
  // Nonzero moments from "earlier steps" and step 3 onwards: 1 - β^step is far from 1.
  const int64_t n = 257;
  const std::vector<float> m0 = Normal(n, 0.3f);
  const std::vector<float> v0 = Uniform(n, 0.05f, 0.5f);
  CheckAdamW(n,
             {.lr = 3e-3f,
              .beta1 = 0.8f,
              .beta2 = 0.9f,
              .eps = 1e-6f,
              .weight_decay = 0.01f,
              .step = 3,
              .grad_scale = 1.5f},
             3, m0, v0);
}

TEST_P(OptimizerTest, AdamW_LargeLrAndWeightDecay_DecaysTheParameterBeforeTheUpdate) {
  // PyTorch order p·(1 - lr·wd) - lr·u differs from decaying the updated parameter by
  // lr²·wd·u = 5e-3 here, far above kParamTol.
  const int64_t n = 100;
  CheckAdamW(n,
             {.lr = 0.1f,
              .beta1 = 0.9f,
              .beta2 = 0.95f,
              .eps = 1e-8f,
              .weight_decay = 0.5f,
              .step = 1,
              .grad_scale = 1.0f},
             3, std::vector<float>(n, 0.0f), std::vector<float>(n, 0.0f));
}

TEST_P(OptimizerTest, AdamW_DefaultOptionsOddLengths_MatchesReference) {
  for (int64_t n : {1, 17, 100}) {
    CheckAdamW(n, AdamWOptions{}, 2, std::vector<float>(n, 0.0f), std::vector<float>(n, 0.0f));
  }
}

TEST_P(OptimizerTest, SumSquares_VariousLengths_MatchesFloat64Reference) {
  for (int64_t n : {1, 7, 1031, 100003}) {
    SCOPED_TRACE(::testing::Message() << "n=" << n);
    const std::vector<float> x = Normal(n, 3.0f);
    const double want = ref::SumSquares(ToF64(x));
    // n ≤ 1e5 float64 additions err ≲ n·2⁻⁵³ ≈ 1e-11; squaring in float32 before widening
    // would add ≤ ε/2 ≈ 6e-8 per term. (Float32 accumulation is caught by the next test.)
    EXPECT_NEAR(backend().SumSquares(Upload(x, {n})), want, 1e-7 * want);
  }
}

TEST_P(OptimizerTest, SumSquares_SmallTermsBesideALargeOne_AreNotLost) {
  // 4096² = 2²⁴ plus 100000 · (2⁻¹⁰)² = 0.095...: every partial sum is exact in float64, while
  // float32 (ulp 2 at 2²⁴) drops the small terms whatever the order.
  const int64_t n = 100001;
  std::vector<float> x(n, 1.0f / 1024.0f);
  x[n / 2] = 4096.0f;
  const double want = 16777216.0 + 100000.0 / (1024.0 * 1024.0);
  EXPECT_EQ(backend().SumSquares(Upload(x, {n})), want);
}

TEST_P(OptimizerTest, Scale_VariousFactors_MultipliesEveryElementOnce) {
  for (float alpha : {0.37f, -1.0f, 0.0f, 1.0f / 3.0f}) {
    SCOPED_TRACE(::testing::Message() << "alpha=" << alpha);
    const int64_t n = 1031;
    const std::vector<float> x = Normal(n);
    Tensor tx = Upload(x, {n});
    backend().Scale(tx, alpha);
    // One float32 product is the float64 product rounded once: exact (±0 compare equal).
    EXPECT_TRUE(NearEach(Download(tx), ToF64(ToF32(ref::Scale(ToF64(x), alpha))), 0, 0));
  }
}

}  // namespace
}  // namespace fullband::ops::test

// SwiGluForward/Backward against the float64 reference: out = silu(gate) ⊙ up over (N, F) with
// F not a multiple of 16, and saturated gates (±20..±100, where a naive exp overflows); the
// backward by finite differences with dgate and dup overwritten.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "tests/ops/backend_fixture.h"
#include "tests/ops/reference.h"

namespace fullband::ops::test {
namespace {

// Elementwise: a sigmoid (exp: a few ulp) and two products, ≲ 1e-6 relative per element;
// absolute 1e-6 lets silu's tails (|silu(-20)| ≈ 4e-8, silu(-100) ≈ 4e-42) round or flush.
constexpr double kForwardRtol = 2e-6;
constexpr double kForwardAtol = 1e-6;
// dgate = dout·up·σ(g)(1 + g(1-σ(g))): a few more roundings, and 1 - σ cancels for large g.
constexpr double kBackwardTol = 1e-5;

struct Case {
  int64_t n, f;
};

class SwiGluTest : public BackendTest {
 protected:
  void CheckForward(int64_t n, int64_t f, const std::vector<float>& gate) {
    SCOPED_TRACE(::testing::Message() << "N=" << n << " F=" << f);
    const std::vector<float> up = Normal(n * f);
    Tensor out = Nans({n, f});
    backend().SwiGluForward(out, Upload(gate, {n, f}), Upload(up, {n, f}));
    EXPECT_TRUE(
        NearEach(Download(out), ref::SwiGlu(ToF64(gate), ToF64(up)), kForwardRtol, kForwardAtol));
  }

  void CheckBackward(int64_t n, int64_t f, const std::vector<float>& gate) {
    SCOPED_TRACE(::testing::Message() << "N=" << n << " F=" << f);
    const std::vector<float> up = Normal(n * f);
    const std::vector<float> dout = Normal(n * f);
    ref::Vec gate64 = ToF64(gate), up64 = ToF64(up);
    const ref::Vec dout64 = ToF64(dout);
    auto loss = [&] { return ref::Dot(dout64, ref::SwiGlu(gate64, up64)); };
    const ref::Vec want_dgate = ref::NumericalGradient(loss, &gate64);
    const ref::Vec want_dup = ref::NumericalGradient(loss, &up64);

    Tensor dgate = Nans({n, f}), dup = Nans({n, f});
    backend().SwiGluBackward(dgate, dup, Upload(dout, {n, f}), Upload(gate, {n, f}),
                             Upload(up, {n, f}));
    EXPECT_TRUE(NearMax(Download(dgate), want_dgate, kBackwardTol)) << "dgate";
    EXPECT_TRUE(NearMax(Download(dup), want_dup, kBackwardTol)) << "dup";
  }

  // Gates covering the saturated tails on both sides.
  static std::vector<float> ExtremeGates(int64_t count) {
    const float values[] = {-100.0f, -88.0f, -50.0f, -20.0f, -5.0f, 0.0f,
                            5.0f,    20.0f,  50.0f,  88.0f,  100.0f};
    std::vector<float> gate(count);
    for (int64_t i = 0; i < count; ++i) gate[i] = values[i % 11];
    return gate;
  }
};
FB_INSTANTIATE_BACKEND_TEST_SUITE(SwiGluTest);

TEST_P(SwiGluTest, Forward_VariousShapes_MatchesReference) {
  for (const Case c : {Case{1, 24}, Case{7, 40}, Case{33, 100}, Case{3, 1}}) {
    CheckForward(c.n, c.f, Normal(c.n * c.f, 2.0f));
  }
}

// The paper's 1B model: F = 6656 per token (docs/MODEL.md).
TEST_P(SwiGluTest, Forward_OneBillionConfigWidth_MatchesReference) {
  CheckForward(3, 6656, Normal(3 * 6656, 2.0f));
}

TEST_P(SwiGluTest, Forward_SaturatedGates_StaysFiniteAndMatchesReference) {
  CheckForward(3, 22, ExtremeGates(66));
}

TEST_P(SwiGluTest, Backward_VariousShapes_MatchesFiniteDifferences) {
  for (const Case c : {Case{1, 24}, Case{7, 100}, Case{33, 40}}) {
    CheckBackward(c.n, c.f, Normal(c.n * c.f, 2.0f));
  }
}

TEST_P(SwiGluTest, Backward_SaturatedGates_StaysFiniteAndMatchesFiniteDifferences) {
  CheckBackward(3, 22, ExtremeGates(66));
}

}  // namespace
}  // namespace fullband::ops::test

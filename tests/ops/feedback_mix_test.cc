// FeedbackMixForward/Backward against the float64 reference: out[n] = plain[n] ? e[n] :
// value[n] ⊙ sigmoid(gate[n]) with plain flags of any nonzero value (1, 7, 255), all-plain and
// all-feedback blocks; the backward by finite differences with dvalue, dgate and de
// overwritten, and exactly zero where they do not contribute.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "tests/ops/backend_fixture.h"
#include "tests/ops/reference.h"

namespace fullband::ops::test {
namespace {

// A sigmoid (exp: a few ulp) and a product per element: ≲ 1e-6 relative; absolute 1e-6 lets
// a sigmoid's ≲ ε tails round away. Plain rows are copies.
constexpr double kForwardRtol = 2e-6;
constexpr double kForwardAtol = 1e-6;
// dgate = dout·value·σ(1-σ): a few more roundings, still elementwise.
constexpr double kBackwardTol = 1e-5;

class FeedbackMixTest : public BackendTest {
 protected:
  std::vector<uint8_t> Flags(int64_t n, int mode) {
    // mode 0: mixed (row 0 plain like a sequence start, nonzero values 1, 7, 255);
    // 1: all plain; 2: no plain row.
    std::vector<uint8_t> plain(n, 0);
    const uint8_t nonzero[] = {1, 7, 255};
    for (int64_t i = 0; i < n; ++i) {
      if (mode == 1) plain[i] = nonzero[i % 3];
      if (mode == 0 && (i == 0 || RandomIds(1, 0, 3)[0] == 0)) plain[i] = nonzero[i % 3];
    }
    return plain;
  }

  void CheckForward(int64_t n, int64_t d, int mode) {
    SCOPED_TRACE(::testing::Message() << "N=" << n << " D=" << d << " mode=" << mode);
    const std::vector<float> value = Normal(n * d), gate = Normal(n * d, 2.0f), e = Normal(n * d);
    const std::vector<uint8_t> plain = Flags(n, mode);
    Tensor out = Nans({n, d});
    backend().FeedbackMixForward(out, Upload(value, {n, d}), Upload(gate, {n, d}),
                                 Upload(e, {n, d}), Upload(plain, {n}));
    EXPECT_TRUE(NearEach(Download(out),
                         ref::FeedbackMix(ToF64(value), ToF64(gate), ToF64(e), plain, n, d),
                         kForwardRtol, kForwardAtol));
  }

  void CheckBackward(int64_t n, int64_t d, int mode) {
    SCOPED_TRACE(::testing::Message() << "N=" << n << " D=" << d << " mode=" << mode);
    const std::vector<float> value = Normal(n * d), gate = Normal(n * d, 2.0f), e = Normal(n * d),
                             dout = Normal(n * d);
    const std::vector<uint8_t> plain = Flags(n, mode);
    ref::Vec value64 = ToF64(value), gate64 = ToF64(gate), e64 = ToF64(e);
    const ref::Vec dout64 = ToF64(dout);
    auto loss = [&] {
      return ref::Dot(dout64, ref::FeedbackMix(value64, gate64, e64, plain, n, d));
    };
    const ref::Vec want_dvalue = ref::NumericalGradient(loss, &value64);
    const ref::Vec want_dgate = ref::NumericalGradient(loss, &gate64);
    const ref::Vec want_de = ref::NumericalGradient(loss, &e64);

    Tensor dvalue = Nans({n, d}), dgate = Nans({n, d}), de = Nans({n, d});
    backend().FeedbackMixBackward(dvalue, dgate, de, Upload(dout, {n, d}), Upload(value, {n, d}),
                                  Upload(gate, {n, d}), Upload(plain, {n}));
    EXPECT_TRUE(NearMax(Download(dvalue), want_dvalue, kBackwardTol)) << "dvalue";
    EXPECT_TRUE(NearMax(Download(dgate), want_dgate, kBackwardTol)) << "dgate";
    EXPECT_TRUE(NearMax(Download(de), want_de, kBackwardTol)) << "de";
  }
};
FB_INSTANTIATE_BACKEND_TEST_SUITE(FeedbackMixTest);

// The paper's 1B width (D = 1536) over 512 tokens, forward against the reference; backward
// against its closed form: de = dout on plain rows, dvalue = dout·σ(gate) and dgate =
// dout·value·σ(1 − σ) elsewhere (finite differences would take minutes).
TEST_P(FeedbackMixTest, OneBillionConfigWidth_ForwardAndBackwardMatchReference) {
  const int64_t n = 512, d = 1536;
  CheckForward(n, d, 0);
  const std::vector<float> value = Normal(n * d), gate = Normal(n * d, 2.0f), dout = Normal(n * d);
  const std::vector<uint8_t> plain = Flags(n, 0);
  Tensor dvalue = Nans({n, d}), dgate = Nans({n, d}), de = Nans({n, d});
  backend().FeedbackMixBackward(dvalue, dgate, de, Upload(dout, {n, d}), Upload(value, {n, d}),
                                Upload(gate, {n, d}), Upload(plain, {n}));
  ref::Vec want_dvalue(n * d, 0.0), want_dgate(n * d, 0.0), want_de(n * d, 0.0);
  for (int64_t i = 0; i < n * d; ++i) {
    const double g = dout[i], s = 1.0 / (1.0 + std::exp(-static_cast<double>(gate[i])));
    if (plain[i / d] != 0) {
      want_de[i] = g;
    } else {
      want_dvalue[i] = g * s;
      want_dgate[i] = g * value[i] * s * (1.0 - s);
    }
  }
  EXPECT_TRUE(NearMax(Download(dvalue), want_dvalue, kBackwardTol)) << "dvalue";
  EXPECT_TRUE(NearMax(Download(dgate), want_dgate, kBackwardTol)) << "dgate";
  EXPECT_TRUE(NearMax(Download(de), want_de, kBackwardTol)) << "de";
}

TEST_P(FeedbackMixTest, Forward_MixedPlainFlags_MatchesReference) {
  CheckForward(1, 24, 0);
  CheckForward(7, 40, 0);
  CheckForward(33, 100, 0);
}

TEST_P(FeedbackMixTest, Forward_AllPlainOrNoPlain_MatchesReference) {
  CheckForward(7, 24, 1);
  CheckForward(7, 24, 2);
}

TEST_P(FeedbackMixTest, Backward_MixedPlainFlags_MatchesFiniteDifferences) {
  CheckBackward(1, 24, 0);
  CheckBackward(7, 40, 0);
  CheckBackward(7, 100, 0);
  CheckBackward(33, 24, 0);
}

TEST_P(FeedbackMixTest, Backward_AllPlainOrNoPlain_MatchesFiniteDifferences) {
  CheckBackward(7, 24, 1);
  CheckBackward(7, 24, 2);
}

}  // namespace
}  // namespace fullband::ops::test

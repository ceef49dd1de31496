// Backend::Gemm against the float64 reference: all four transpose combinations, odd sizes,
// padded leading dimensions, alpha/beta (beta = 0 must ignore NaN in C), batches with strides
// including 0 (broadcast), and that nothing outside each C[i]'s (m, n) window is written.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/simd_kernels.h"
#include "tests/ops/backend_fixture.h"
#include "tests/ops/reference.h"

namespace fullband::ops::test {
namespace {

// A float32 dot product of k terms errs by ~√k·ε·|a||b| typically (k·ε worst case); relative
// to the largest entry of C that is ≲ 2e-6 for k ≤ 100. 2e-5 leaves margin while TF32
// (ε ≈ 1e-3) or half-precision accumulation would fail.
constexpr double kGemmTol = 2e-5;
// k = 515: worst-case bound k·ε ≈ 6e-5.
constexpr double kGemmLargeKTol = 1e-4;
// k up to 4,480: the typical error √k·ε·(a few) stays below 1e-5 of the largest entry (≈ 3√k).
constexpr double kGemmLongKTol = 1e-4;
constexpr float kSentinel = 12345.0f;  // marks C memory outside the (m, n) windows

struct GemmCase {
  bool trans_a = false, trans_b = false;
  int64_t m = 1, n = 1, k = 1;
  int64_t pad = 0;  // extra columns in every leading dimension
  float alpha = 1.0f, beta = 0.0f;
  int64_t batch = 1;
  bool broadcast_a = false, broadcast_b = false;
  bool use_single_overload = false;

  std::string Name() const {
    return "trans_a=" + std::to_string(trans_a) + " trans_b=" + std::to_string(trans_b) +
           " m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
           " pad=" + std::to_string(pad) + " alpha=" + std::to_string(alpha) +
           " beta=" + std::to_string(beta) + " batch=" + std::to_string(batch) +
           " broadcast_a=" + std::to_string(broadcast_a) +
           " broadcast_b=" + std::to_string(broadcast_b);
  }
};

class GemmTest : public BackendTest {
 protected:
  void RunCase(const GemmCase& c, double tol) {
    SCOPED_TRACE(c.Name());
    // Stored A is (m, k), or (k, m) when transposed; likewise B (k, n) or (n, k).
    const int64_t lda = (c.trans_a ? c.m : c.k) + c.pad;
    const int64_t ldb = (c.trans_b ? c.k : c.n) + c.pad;
    const int64_t ldc = c.n + c.pad;
    const int64_t size_a = (c.trans_a ? c.k : c.m) * lda;
    const int64_t size_b = (c.trans_b ? c.n : c.k) * ldb;
    const int64_t size_c = c.m * ldc;
    // Batch items sit a few elements apart, so strides differ from the matrix sizes.
    const int64_t stride_a = c.broadcast_a ? 0 : size_a + 5;
    const int64_t stride_b = c.broadcast_b ? 0 : size_b + 3;
    const int64_t stride_c = size_c + 7;
    const int64_t total_a = stride_a * (c.batch - 1) + size_a;
    const int64_t total_b = stride_b * (c.batch - 1) + size_b;
    const int64_t total_c = stride_c * (c.batch - 1) + size_c;

    const std::vector<float> a = Normal(total_a);
    const std::vector<float> b = Normal(total_b);
    std::vector<float> c_init(total_c, kSentinel);
    std::vector<bool> in_window(total_c, false);
    for (int64_t i = 0; i < c.batch; ++i) {
      for (int64_t r = 0; r < c.m; ++r) {
        for (int64_t col = 0; col < c.n; ++col) {
          const int64_t idx = i * stride_c + r * ldc + col;
          in_window[idx] = true;
          c_init[idx] = c.beta == 0 ? kNaN : Normal(1)[0];
        }
      }
    }

    Tensor ta = Upload(a, {total_a});
    Tensor tb = Upload(b, {total_b});
    Tensor tc = Upload(c_init, {total_c});
    if (c.use_single_overload) {
      backend().Gemm(c.trans_a, c.trans_b, c.m, c.n, c.k, c.alpha, ta.f32(), lda, tb.f32(), ldb,
                     c.beta, tc.f32(), ldc);
    } else {
      backend().Gemm(c.trans_a, c.trans_b, c.m, c.n, c.k, c.alpha, ta.f32(), lda, stride_a,
                     tb.f32(), ldb, stride_b, c.beta, tc.f32(), ldc, stride_c, c.batch);
    }
    const std::vector<float> got = Download(tc);

    ref::Vec expected = ToF64(c_init);
    const ref::Vec a64 = ToF64(a), b64 = ToF64(b);
    ref::Gemm(c.trans_a, c.trans_b, c.m, c.n, c.k, c.alpha, a64.data(), lda, stride_a, b64.data(),
              ldb, stride_b, c.beta, expected.data(), ldc, stride_c, c.batch);

    std::vector<float> got_window, got_outside;
    ref::Vec expected_window;
    for (int64_t idx = 0; idx < total_c; ++idx) {
      if (in_window[idx]) {
        got_window.push_back(got[idx]);
        expected_window.push_back(expected[idx]);
      } else {
        got_outside.push_back(got[idx]);
      }
    }
    EXPECT_TRUE(NearMax(got_window, expected_window, tol));
    EXPECT_TRUE(BitwiseEqual(got_outside, std::vector<float>(got_outside.size(), kSentinel)))
        << "Gemm wrote outside the (m, n) windows of C";
  }
};
FB_INSTANTIATE_BACKEND_TEST_SUITE(GemmTest);

TEST_P(GemmTest, AllTransposes_OddSizesAndPaddedStrides_MatchReference) {
  struct Size {
    int64_t m, n, k, pad;
  };
  for (const Size s : {Size{1, 1, 1, 0}, Size{7, 13, 5, 3}, Size{33, 24, 40, 0},
                       Size{17, 100, 3, 1}, Size{2, 9, 65, 4}}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        RunCase({.trans_a = ta,
                 .trans_b = tb,
                 .m = s.m,
                 .n = s.n,
                 .k = s.k,
                 .pad = s.pad,
                 .alpha = 0.7f,
                 .beta = 1.3f},
                kGemmTol);
      }
    }
  }
}

TEST_P(GemmTest, BetaZero_IgnoresNaNInC) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      RunCase({.trans_a = ta,
               .trans_b = tb,
               .m = 7,
               .n = 24,
               .k = 10,
               .pad = 2,
               .alpha = -1.5f,
               .beta = 0.0f},
              kGemmTol);
    }
  }
}

TEST_P(GemmTest, AlphaAndBetaVariants_MatchReference) {
  for (float alpha : {1.0f, -0.25f, 2.0f}) {
    for (float beta : {0.0f, 1.0f, -0.5f}) {
      RunCase({.trans_a = false,
               .trans_b = true,
               .m = 9,
               .n = 10,
               .k = 16,
               .pad = 0,
               .alpha = alpha,
               .beta = beta},
              kGemmTol);
    }
  }
}

TEST_P(GemmTest, Batched_StridedItems_MatchReference) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      RunCase({.trans_a = ta,
               .trans_b = tb,
               .m = 7,
               .n = 10,
               .k = 8,
               .pad = 1,
               .alpha = 0.5f,
               .beta = 0.75f,
               .batch = 3},
              kGemmTol);
    }
  }
}

TEST_P(GemmTest, Batched_ZeroStrideA_BroadcastsA) {
  for (bool ta : {false, true}) {
    RunCase({.trans_a = ta,
             .trans_b = false,
             .m = 5,
             .n = 12,
             .k = 7,
             .pad = 2,
             .alpha = 1.0f,
             .beta = 0.0f,
             .batch = 4,
             .broadcast_a = true},
            kGemmTol);
  }
}

TEST_P(GemmTest, Batched_ZeroStrideB_BroadcastsB) {
  for (bool tb : {false, true}) {
    RunCase({.trans_a = false,
             .trans_b = tb,
             .m = 33,
             .n = 8,
             .k = 10,
             .pad = 0,
             .alpha = 1.0f,
             .beta = 1.0f,
             .batch = 3,
             .broadcast_b = true},
            kGemmTol);
  }
}

TEST_P(GemmTest, SingleMatrixOverload_MatchesReference) {
  RunCase({.trans_a = true,
           .trans_b = false,
           .m = 13,
           .n = 7,
           .k = 24,
           .pad = 3,
           .alpha = 0.3f,
           .beta = 0.0f,
           .use_single_overload = true},
          kGemmTol);
}

TEST_P(GemmTest, LargerSizes_MatchReference) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      RunCase({.trans_a = ta,
               .trans_b = tb,
               .m = 96,
               .n = 130,
               .k = 515,
               .pad = 0,
               .alpha = 1.0f,
               .beta = 0.0f},
              kGemmLargeKTol);
    }
  }
}

// Shapes with k ≥ 32·max(m, n) and n a multiple of 32 run the CPU backend's long-K kernel
// (Note [Long-K GEMM] in ops/cpu/simd_kernels.cc) on every instruction set: full 6-row tiles
// and a remainder, k not a multiple of its 256-row panels, more rows than one 132-row block,
// padded leading dimensions, beta 0 over NaN and beta ≠ 0.
TEST_P(GemmTest, LongK_NoTranspose_MatchesReference) {
  struct Size {
    int64_t m, n, k, pad;
    float alpha, beta;
  };
  for (const Size s : {Size{13, 64, 2051, 3, 0.7f, 1.3f}, Size{1, 32, 1100, 0, 1.0f, 0.0f},
                       Size{140, 32, 4480, 1, -0.5f, 0.0f}, Size{6, 96, 3100, 2, 1.0f, 1.0f}}) {
    if (device() == Device::kCpu) {
      ASSERT_TRUE(cpu::UsesLongKGemm(**cpu::SimdKernelsFor(GetParam().cpu_isa), false, false, s.m,
                                     s.n, s.k))
          << s.m << " x " << s.n << " x " << s.k << " would not run the long-K kernel";
    }
    RunCase({.trans_a = false,
             .trans_b = false,
             .m = s.m,
             .n = s.n,
             .k = s.k,
             .pad = s.pad,
             .alpha = s.alpha,
             .beta = s.beta},
            kGemmLongKTol);
  }
}

// The paper's 1B model (docs/MODEL.md: D = 1536, F = 6656, H·Dh = 1536, V = 100,352) in the
// three forms the model uses — y = x Wᵀ, dx = dy W, dW += dyᵀ x — on 256 tokens: the FFN's up
// and down projections and a readout chunk against 8,192 vocabulary rows. Every element of C
// is computed; rows 0, m/2 and m − 1 of it are checked against float64 dot products (a whole
// float64 reference would take seconds).
TEST_P(GemmTest, OneBillionConfigShapes_SampledRowsMatchFloat64) {
  struct Shape3 {
    bool ta, tb;
    int64_t m, n, k;
    float beta;
  };
  for (const Shape3 s : {Shape3{false, true, 256, 6656, 1536, 0.0f},     // FFN up: x W1ᵀ
                         Shape3{false, false, 256, 1536, 6656, 0.0f},    // FFN down, backward
                         Shape3{true, false, 1536, 6656, 256, 1.0f},     // dW1 += dyᵀ x
                         Shape3{false, true, 64, 8192, 1536, 0.0f}}) {  // readout chunk
    SCOPED_TRACE(::testing::Message() << "trans_a=" << s.ta << " trans_b=" << s.tb << " m=" << s.m
                                      << " n=" << s.n << " k=" << s.k);
    const int64_t lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
    const std::vector<float> a = Normal(s.m * s.k), b = Normal(s.k * s.n);
    const std::vector<float> c0 =
        s.beta == 0 ? std::vector<float>(s.m * s.n, kNaN) : Normal(s.m * s.n);
    Tensor tc = Upload(c0, {s.m * s.n});
    backend().Gemm(s.ta, s.tb, s.m, s.n, s.k, 1.0f, Upload(a, {s.m * s.k}).f32(), lda,
                   Upload(b, {s.k * s.n}).f32(), ldb, s.beta, tc.f32(), s.n);
    const std::vector<float> c = Download(tc);
    for (const int64_t row : {int64_t{0}, s.m / 2, s.m - 1}) {
      std::vector<float> got(c.begin() + row * s.n, c.begin() + (row + 1) * s.n);
      ref::Vec want(s.n);
      for (int64_t j = 0; j < s.n; ++j) {
        double acc = s.beta == 0 ? 0.0 : s.beta * static_cast<double>(c0[row * s.n + j]);
        for (int64_t p = 0; p < s.k; ++p) {
          const double x = s.ta ? a[p * lda + row] : a[row * lda + p];
          const double y = s.tb ? b[j * ldb + p] : b[p * ldb + j];
          acc += x * y;
        }
        want[j] = acc;
      }
      // k up to 6,656: the typical √k·ε error of a float32 sum, with margin (kGemmLongKTol).
      EXPECT_TRUE(NearMax(got, want, kGemmLongKTol)) << "row " << row;
    }
  }
}

}  // namespace
}  // namespace fullband::ops::test

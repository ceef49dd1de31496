// BackendTest: a GoogleTest fixture parameterized over the ops backends — the CPU backend once
// per instruction set of its vectorized loops (avx512, avx2, sse; an instance the CPU cannot run
// is skipped, visibly), and cuda, skipped without a device — with helpers that move host
// vectors into and out of backend buffers, so every op test is backend-generic, and
// comparison helpers that name the worst element. Buffers are freed in TearDown.
// Instantiate a suite with FB_INSTANTIATE_BACKEND_TEST_SUITE(MySuite).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "ops/backend.h"
#include "ops/tensor.h"
#include "tests/ops/reference.h"

namespace fullband::ops::test {

inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// One backend under test: a device, and on the CPU the instruction set of its kernels.
struct BackendVariant {
  Device device;
  const char* cpu_isa;  // "" for cuda
};

class BackendTest : public ::testing::TestWithParam<BackendVariant> {
 protected:
  void SetUp() override;
  void TearDown() override;

  Backend& backend() { return *backend_; }
  Device device() const { return GetParam().device; }

  // Device buffers holding a copy of `host` (numel must match), freed in TearDown.
  Tensor Upload(const std::vector<float>& host, Shape shape);
  Tensor Upload(const std::vector<int32_t>& host, Shape shape);
  Tensor Upload(const std::vector<uint8_t>& host, Shape shape);
  // An f32 buffer with every element `value`, written from the host (not with Backend::Fill).
  Tensor Full(Shape shape, float value);
  // An f32 buffer of NaN: an output that must be overwritten, never read.
  Tensor Nans(Shape shape) { return Full(shape, kNaN); }
  // Raw device memory, freed in TearDown.
  void* AllocateBytes(size_t bytes);

  // Synchronizes the backend, then copies the whole tensor to the host.
  std::vector<float> Download(const Tensor& t);
  std::vector<int32_t> DownloadI32(const Tensor& t);
  std::vector<uint8_t> DownloadU8(const Tensor& t);

  // Deterministic random data: the generator is seeded identically in every test.
  std::vector<float> Normal(size_t n, float stddev = 1.0f, float mean = 0.0f);
  std::vector<float> Uniform(size_t n, float lo, float hi);
  std::vector<int32_t> RandomIds(size_t n, int32_t lo, int32_t hi);  // uniform in [lo, hi)
  std::mt19937_64& rng() { return rng_; }

 private:
  std::unique_ptr<Backend> backend_;
  std::vector<void*> allocations_;
  std::mt19937_64 rng_;
};

// "cpu_avx2", "cpu_sse", ... / "cuda": the instance suffix in test names.
std::string BackendVariantName(const BackendVariant& variant);
std::string BackendParamName(const ::testing::TestParamInfo<BackendVariant>& info);

// Exact f32 -> f64, and rounding f64 -> f32 (to feed reference values to a backend).
ref::Vec ToF64(const std::vector<float>& x);
std::vector<float> ToF32(const ref::Vec& x);

// Elementwise a + b, for expected accumulated gradients (prefill + gradient).
ref::Vec Plus(const ref::Vec& a, const ref::Vec& b);

// Passes when every actual value is finite and max_i |actual_i - expected_i| <= tol · M, where
// M = max_i |expected_i| (1 if all expected are 0): the max-error-relative-to-max-magnitude
// metric. The failure message names the worst element.
::testing::AssertionResult NearMax(const std::vector<float>& actual, const ref::Vec& expected,
                                   double tol);
// Passes when every |actual_i - expected_i| <= atol + rtol · |expected_i| (NaN never passes).
::testing::AssertionResult NearEach(const std::vector<float>& actual, const ref::Vec& expected,
                                    double rtol, double atol);
// Passes when both hold the same float bit patterns (for ops that only move data).
::testing::AssertionResult BitwiseEqual(const std::vector<float>& actual,
                                        const std::vector<float>& expected);

}  // namespace fullband::ops::test

namespace fullband::ops::test {
// Lets GoogleTest print a parameter as "cpu_avx2" / "cuda" instead of raw bytes.
inline void PrintTo(const BackendVariant& variant, std::ostream* os) {
  *os << BackendVariantName(variant);
}
}  // namespace fullband::ops::test

#define FB_INSTANTIATE_BACKEND_TEST_SUITE(suite)                                          \
  INSTANTIATE_TEST_SUITE_P(                                                               \
      Backends, suite,                                                                    \
      ::testing::Values(                                                                  \
          ::fullband::ops::test::BackendVariant{::fullband::ops::Device::kCpu, "avx512"}, \
          ::fullband::ops::test::BackendVariant{::fullband::ops::Device::kCpu, "avx2"},   \
          ::fullband::ops::test::BackendVariant{::fullband::ops::Device::kCpu, "sse"},    \
          ::fullband::ops::test::BackendVariant{::fullband::ops::Device::kCuda, ""}),     \
      ::fullband::ops::test::BackendParamName)

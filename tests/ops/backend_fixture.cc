// BackendTest: creates the backend under test (skipping cuda instances without a device —
// failing them instead under FULLBAND_REQUIRE_CUDA=1 — and CPU instances whose instruction set
// this CPU lacks),
// tracks and frees device buffers, moves host data in and out, and compares results.
#include "tests/ops/backend_fixture.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "common/check.h"
#include "ops/cpu/simd_kernels.h"

namespace fullband::ops::test {

void BackendTest::SetUp() {
  rng_.seed(0x5eed'f011'ba2dULL);
  if (device() == Device::kCuda && !CudaAvailable()) {
    // Why: the plugin's load error, no device, or a build without CUDA.
    const std::string why = CreateBackend({.device = Device::kCuda}).status().ToString();
    // On a GPU machine (scripts/gpu_check.sh sets it) a CUDA backend that cannot be created is
    // a broken build, not a machine without a GPU.
    const char* require = std::getenv("FULLBAND_REQUIRE_CUDA");
    if (require != nullptr && std::string(require) == "1") {
      FAIL() << "FULLBAND_REQUIRE_CUDA=1 and no CUDA backend: " << why;
    }
    GTEST_SKIP() << "no CUDA backend here (" << why << "): CUDA parity not run";
  }
  const BackendVariant& variant = GetParam();
  if (device() == Device::kCpu && !ops::cpu::SimdKernelsFor(variant.cpu_isa).ok()) {
    GTEST_SKIP() << "this CPU does not run the " << variant.cpu_isa << " kernels";
  }
  StatusOr<std::unique_ptr<Backend>> created =
      CreateBackend({.device = device(), .cpu_isa = variant.cpu_isa});
  ASSERT_TRUE(created.ok()) << "CreateBackend(" << BackendVariantName(variant)
                            << "): " << created.status().ToString();
  backend_ = std::move(created).value();
  ASSERT_EQ(backend_->device(), device());
}

void BackendTest::TearDown() {
  if (backend_ == nullptr) return;
  backend_->Synchronize();
  for (void* ptr : allocations_) backend_->Free(ptr);
  allocations_.clear();
  backend_.reset();
}

void* BackendTest::AllocateBytes(size_t bytes) {
  StatusOr<void*> ptr = backend_->Allocate(bytes);
  FB_CHECK(ptr.ok()) << "Allocate(" << bytes << "): " << ptr.status().ToString();
  allocations_.push_back(*ptr);
  return *ptr;
}

namespace {

template <typename T>
Tensor UploadImpl(Backend& backend, void* dst, const std::vector<T>& host, DType dtype,
                  Shape shape) {
  FB_CHECK_EQ(static_cast<int64_t>(host.size()), shape.numel()) << shape.ToString();
  backend.CopyFromHost(dst, host.data(), host.size() * sizeof(T));
  return Tensor(dst, dtype, shape, backend.device());
}

}  // namespace

Tensor BackendTest::Upload(const std::vector<float>& host, Shape shape) {
  return UploadImpl(*backend_, AllocateBytes(host.size() * sizeof(float)), host, DType::kF32,
                    shape);
}

Tensor BackendTest::Upload(const std::vector<int32_t>& host, Shape shape) {
  return UploadImpl(*backend_, AllocateBytes(host.size() * sizeof(int32_t)), host, DType::kI32,
                    shape);
}

Tensor BackendTest::Upload(const std::vector<uint8_t>& host, Shape shape) {
  return UploadImpl(*backend_, AllocateBytes(host.size() * sizeof(uint8_t)), host, DType::kU8,
                    shape);
}

Tensor BackendTest::Full(Shape shape, float value) {
  return Upload(std::vector<float>(static_cast<size_t>(shape.numel()), value), shape);
}

std::vector<float> BackendTest::Download(const Tensor& t) {
  FB_CHECK(t.dtype == DType::kF32) << t.ToString();
  std::vector<float> host(static_cast<size_t>(t.numel()));
  backend_->Synchronize();
  backend_->CopyToHost(host.data(), t.data, host.size() * sizeof(float));
  return host;
}

std::vector<int32_t> BackendTest::DownloadI32(const Tensor& t) {
  FB_CHECK(t.dtype == DType::kI32) << t.ToString();
  std::vector<int32_t> host(static_cast<size_t>(t.numel()));
  backend_->Synchronize();
  backend_->CopyToHost(host.data(), t.data, host.size() * sizeof(int32_t));
  return host;
}

std::vector<uint8_t> BackendTest::DownloadU8(const Tensor& t) {
  FB_CHECK(t.dtype == DType::kU8) << t.ToString();
  std::vector<uint8_t> host(static_cast<size_t>(t.numel()));
  backend_->Synchronize();
  backend_->CopyToHost(host.data(), t.data, host.size());
  return host;
}

std::vector<float> BackendTest::Normal(size_t n, float stddev, float mean) {
  std::normal_distribution<float> dist(mean, stddev);
  std::vector<float> out(n);
  for (float& x : out) x = dist(rng_);
  return out;
}

std::vector<float> BackendTest::Uniform(size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> out(n);
  for (float& x : out) x = dist(rng_);
  return out;
}

std::vector<int32_t> BackendTest::RandomIds(size_t n, int32_t lo, int32_t hi) {
  std::uniform_int_distribution<int32_t> dist(lo, hi - 1);
  std::vector<int32_t> out(n);
  for (int32_t& x : out) x = dist(rng_);
  return out;
}

std::string BackendVariantName(const BackendVariant& variant) {
  return variant.device == Device::kCpu ? std::string("cpu_") + variant.cpu_isa : "cuda";
}

std::string BackendParamName(const ::testing::TestParamInfo<BackendVariant>& info) {
  return BackendVariantName(info.param);
}

ref::Vec ToF64(const std::vector<float>& x) { return ref::Vec(x.begin(), x.end()); }

std::vector<float> ToF32(const ref::Vec& x) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = static_cast<float>(x[i]);
  return out;
}

ref::Vec Plus(const ref::Vec& a, const ref::Vec& b) {
  FB_CHECK_EQ(a.size(), b.size());
  ref::Vec out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = a[i] + b[i];
  return out;
}

::testing::AssertionResult NearMax(const std::vector<float>& actual, const ref::Vec& expected,
                                   double tol) {
  if (actual.size() != expected.size()) {
    return ::testing::AssertionFailure()
           << "size " << actual.size() << " != expected size " << expected.size();
  }
  double magnitude = 0;
  for (double e : expected) magnitude = std::max(magnitude, std::abs(e));
  if (magnitude == 0) magnitude = 1;
  double worst = -1;
  size_t worst_i = 0, bad = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double err = std::isfinite(actual[i]) ? std::abs(actual[i] - expected[i])
                                                : std::numeric_limits<double>::infinity();
    if (err > tol * magnitude) ++bad;
    if (err > worst) {
      worst = err;
      worst_i = i;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << actual.size() << " elements off; worst [" << worst_i << "]: actual "
         << actual[worst_i] << ", expected " << expected[worst_i] << ", error " << worst / magnitude
         << " of max magnitude " << magnitude << " (tolerance " << tol << ")";
}

::testing::AssertionResult NearEach(const std::vector<float>& actual, const ref::Vec& expected,
                                    double rtol, double atol) {
  if (actual.size() != expected.size()) {
    return ::testing::AssertionFailure()
           << "size " << actual.size() << " != expected size " << expected.size();
  }
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double err = std::abs(static_cast<double>(actual[i]) - expected[i]);
    if (!(err <= atol + rtol * std::abs(expected[i]))) {  // NaN fails
      if (bad++ == 0) first = i;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << actual.size() << " elements off; first [" << first << "]: actual "
         << actual[first] << ", expected " << expected[first] << " (rtol " << rtol << ", atol "
         << atol << ")";
}

::testing::AssertionResult BitwiseEqual(const std::vector<float>& actual,
                                        const std::vector<float>& expected) {
  if (actual.size() != expected.size()) {
    return ::testing::AssertionFailure()
           << "size " << actual.size() << " != expected size " << expected.size();
  }
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    if (std::memcmp(&actual[i], &expected[i], sizeof(float)) != 0) {
      if (bad++ == 0) first = i;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << actual.size() << " elements differ; first [" << first << "]: actual "
         << actual[first] << ", expected " << expected[first];
}

}  // namespace fullband::ops::test

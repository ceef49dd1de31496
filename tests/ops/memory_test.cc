// The memory half of Backend: Allocate (64-byte aligned; RESOURCE_EXHAUSTED when the device
// cannot hold the request), host/device copies, Fill (f32) and Zero (any dtype) touching
// exactly the view they are given.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "tests/ops/backend_fixture.h"

namespace fullband::ops::test {
namespace {

constexpr float kSentinel = -7.25f;

class MemoryTest : public BackendTest {};
FB_INSTANTIATE_BACKEND_TEST_SUITE(MemoryTest);

TEST_P(MemoryTest, Allocate_VariousSizes_Returns64ByteAlignedMemory) {
  for (size_t bytes : {1, 3, 64, 1000, 4096, 1 << 20}) {
    SCOPED_TRACE(::testing::Message() << "bytes=" << bytes);
    void* ptr = AllocateBytes(bytes);
    EXPECT_NE(ptr, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(ptr) % 64, 0u);
  }
}

TEST_P(MemoryTest, Allocate_MoreThanTheDeviceHas_ReturnsResourceExhausted) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer aborts on a 1 EiB request instead of returning null";
#endif
  StatusOr<void*> ptr = backend().Allocate(size_t{1} << 60);  // 1 EiB
  ASSERT_FALSE(ptr.ok());
  EXPECT_EQ(ptr.status().code(), StatusCode::kResourceExhausted) << ptr.status().ToString();
}

TEST_P(MemoryTest, CopyRoundTrip_ThroughDeviceCopy_PreservesBytes) {
  const size_t n = 1001;
  std::vector<uint8_t> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<uint8_t>(i * 37 + 11);
  void* a = AllocateBytes(n);
  void* b = AllocateBytes(n);
  backend().CopyFromHost(a, host.data(), n);
  backend().Copy(b, a, n);
  std::vector<uint8_t> back(n, 0);
  backend().Synchronize();
  backend().CopyToHost(back.data(), b, n);
  EXPECT_EQ(back, host);
}

TEST_P(MemoryTest, Fill_OddLengthView_SetsEveryElementAndNothingElse) {
  // The view starts 16 floats (64 bytes) into the buffer and stops 5 floats short of its end.
  const int64_t n = 1031, before = 16, after = 5;
  Tensor buffer = Full({before + n + after}, kSentinel);
  Tensor view = Tensor::F32(buffer.f32() + before, {n}, device());
  backend().Fill(view, 2.5f);
  std::vector<float> want(before + n + after, kSentinel);
  for (int64_t i = 0; i < n; ++i) want[before + i] = 2.5f;
  EXPECT_TRUE(BitwiseEqual(Download(buffer), want));
}

TEST_P(MemoryTest, Zero_EveryDType_ClearsOnlyTheView) {
  const int64_t before = 64;  // bytes, keeps the view 64-byte aligned
  for (DType dtype : {DType::kF32, DType::kI32, DType::kU8}) {
    SCOPED_TRACE(DTypeName(dtype));
    const int64_t n = dtype == DType::kU8 ? 101 : 13;
    const size_t elem = DTypeSize(dtype);
    const size_t total = before + n * elem + 8;
    std::vector<uint8_t> host(total, 0xA5);  // no zero byte anywhere
    void* buffer = AllocateBytes(total);
    backend().CopyFromHost(buffer, host.data(), total);
    backend().Zero(Tensor(static_cast<uint8_t*>(buffer) + before, dtype, {n}, device()));
    std::vector<uint8_t> got(total);
    backend().Synchronize();
    backend().CopyToHost(got.data(), buffer, total);
    std::memset(host.data() + before, 0, n * elem);
    EXPECT_EQ(got, host);
  }
}

TEST(CreateBackendTest, CudaWithoutDevice_ReturnsUnavailable) {
  if (CudaAvailable()) GTEST_SKIP() << "a CUDA device is present";
  StatusOr<std::unique_ptr<Backend>> created = CreateBackend({.device = Device::kCuda});
  ASSERT_FALSE(created.ok());
  EXPECT_EQ(created.status().code(), StatusCode::kUnavailable) << created.status().ToString();
  EXPECT_FALSE(created.status().message().empty());
}

TEST(CreateBackendTest, CpuIsaOption_NamesTheKernelsOrIsUnavailable) {
  StatusOr<std::unique_ptr<Backend>> sse =
      CreateBackend({.device = Device::kCpu, .cpu_isa = "sse"});
  ASSERT_TRUE(sse.ok()) << sse.status().ToString();  // the x86-64 baseline runs everywhere
  EXPECT_NE((*sse)->name().find("(sse,"), std::string::npos) << (*sse)->name();

  StatusOr<std::unique_ptr<Backend>> bogus =
      CreateBackend({.device = Device::kCpu, .cpu_isa = "neon512"});
  ASSERT_FALSE(bogus.ok());
  EXPECT_EQ(bogus.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(bogus.status().message().find("'neon512'"), std::string::npos)
      << bogus.status().message();
  EXPECT_NE(bogus.status().message().find("sse"), std::string::npos) << bogus.status().message();
}

TEST(CreateBackendTest, Cpu_ReportsItsDeviceAndAName) {
  StatusOr<std::unique_ptr<Backend>> created = CreateBackend({.device = Device::kCpu});
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_EQ((*created)->device(), Device::kCpu);
  EXPECT_FALSE((*created)->name().empty());
}

}  // namespace
}  // namespace fullband::ops::test

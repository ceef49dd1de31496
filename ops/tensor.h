// Tensor: a non-owning, contiguous, row-major view {data, dtype, shape, device}.
//
// Views never own memory; arenas (ops/arena.h) and the backends' allocators do. Every op
// checks the shapes of the views it gets with FB_CHECK: a mismatch is a programmer error.
// Dimension letters are fixed project-wide: B, T, D, H, Hkv, Dh, F, V, L, K (passes), and
// N = B·T rows where an op does not care about sequences.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "common/check.h"

namespace fullband::ops {

enum class DType : uint8_t { kF32, kI32, kU8 };
enum class Device : uint8_t { kCpu, kCuda };

size_t DTypeSize(DType dtype);
const char* DTypeName(DType dtype);
const char* DeviceName(Device device);

inline constexpr int kMaxRank = 4;

struct Shape {
  int rank = 0;
  std::array<int64_t, kMaxRank> dims{};

  Shape() = default;
  Shape(std::initializer_list<int64_t> list);

  int64_t operator[](int i) const {
    FB_CHECK(i >= 0 && i < rank) << "dim " << i << " of rank-" << rank << " shape";
    return dims[i];
  }
  int64_t numel() const;
  std::string ToString() const;  // "(2, 3, 4)"
  friend bool operator==(const Shape& a, const Shape& b);
  friend bool operator!=(const Shape& a, const Shape& b) { return !(a == b); }
};

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::kF32;
  Shape shape;
  Device device = Device::kCpu;

  Tensor() = default;
  Tensor(void* d, DType t, Shape s, Device dev = Device::kCpu)
      : data(d), dtype(t), shape(s), device(dev) {}

  static Tensor F32(float* d, Shape s, Device dev = Device::kCpu) {
    return Tensor(d, DType::kF32, s, dev);
  }
  static Tensor I32(int32_t* d, Shape s, Device dev = Device::kCpu) {
    return Tensor(d, DType::kI32, s, dev);
  }
  static Tensor U8(uint8_t* d, Shape s, Device dev = Device::kCpu) {
    return Tensor(d, DType::kU8, s, dev);
  }

  int rank() const { return shape.rank; }
  int64_t dim(int i) const { return shape[i]; }
  int64_t numel() const { return shape.numel(); }
  size_t bytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype); }
  bool empty() const { return data == nullptr; }

  float* f32() const {
    FB_CHECK(dtype == DType::kF32) << "tensor is " << DTypeName(dtype) << ", wanted f32";
    return static_cast<float*>(data);
  }
  int32_t* i32() const {
    FB_CHECK(dtype == DType::kI32) << "tensor is " << DTypeName(dtype) << ", wanted i32";
    return static_cast<int32_t*>(data);
  }
  uint8_t* u8() const {
    FB_CHECK(dtype == DType::kU8) << "tensor is " << DTypeName(dtype) << ", wanted u8";
    return static_cast<uint8_t*>(data);
  }
  // The same memory seen with another shape of equal numel.
  Tensor Reshape(Shape s) const;
  std::string ToString() const;  // "f32(2, 3) on cpu"
};

}  // namespace fullband::ops

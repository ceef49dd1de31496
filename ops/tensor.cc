#include "ops/tensor.h"

#include <sstream>

namespace fullband::ops {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kI32:
      return 4;
    case DType::kU8:
      return 1;
  }
  return 0;
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kI32:
      return "i32";
    case DType::kU8:
      return "u8";
  }
  return "?";
}

const char* DeviceName(Device device) { return device == Device::kCpu ? "cpu" : "cuda"; }

Shape::Shape(std::initializer_list<int64_t> list) {
  FB_CHECK(list.size() <= static_cast<size_t>(kMaxRank)) << "rank " << list.size();
  for (int64_t d : list) {
    FB_CHECK(d >= 0) << "negative dimension " << d;
    dims[rank++] = d;
  }
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= dims[i];
  return n;
}

std::string Shape::ToString() const {
  std::ostringstream out;
  out << "(";
  for (int i = 0; i < rank; ++i) out << (i ? ", " : "") << dims[i];
  out << ")";
  return out.str();
}

bool operator==(const Shape& a, const Shape& b) {
  if (a.rank != b.rank) return false;
  for (int i = 0; i < a.rank; ++i) {
    if (a.dims[i] != b.dims[i]) return false;
  }
  return true;
}

Tensor Tensor::Reshape(Shape s) const {
  FB_CHECK_EQ(s.numel(), numel()) << "reshape " << shape.ToString() << " to " << s.ToString();
  return Tensor(data, dtype, s, device);
}

std::string Tensor::ToString() const {
  return std::string(DTypeName(dtype)) + shape.ToString() + " on " + DeviceName(device);
}

}  // namespace fullband::ops

#include "ops/arena.h"

#include <utility>

namespace fullband::ops {

StatusOr<Arena> Arena::Create(Backend* backend, size_t capacity) {
  FB_ASSIGN_OR_RETURN(void* base, backend->Allocate(capacity));
  return Arena(backend, base, capacity);
}

Arena::Arena(Arena&& other) noexcept
    : backend_(other.backend_), base_(other.base_), capacity_(other.capacity_), used_(other.used_) {
  other.base_ = nullptr;
  other.capacity_ = other.used_ = 0;
}

Arena& Arena::operator=(Arena&& other) noexcept {
  if (this != &other) {
    if (base_ != nullptr) backend_->Free(base_);
    backend_ = other.backend_;
    base_ = std::exchange(other.base_, nullptr);
    capacity_ = std::exchange(other.capacity_, 0);
    used_ = std::exchange(other.used_, 0);
  }
  return *this;
}

Arena::~Arena() {
  if (base_ != nullptr) backend_->Free(base_);
}

Tensor Arena::Take(DType dtype, Shape shape) {
  constexpr size_t kAlign = 64;
  const size_t bytes = static_cast<size_t>(shape.numel()) * DTypeSize(dtype);
  const size_t start = (used_ + kAlign - 1) / kAlign * kAlign;
  FB_CHECK(start + bytes <= capacity_)
      << "arena of " << capacity_ << " bytes cannot take " << bytes << " more at " << start;
  used_ = start + bytes;
  return Tensor(static_cast<char*>(base_) + start, dtype, shape, backend_->device());
}

}  // namespace fullband::ops

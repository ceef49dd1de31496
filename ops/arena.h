// Arena: one device allocation, carved into tensors by a bump pointer and reset as a whole.
//
// Parameters, gradients, optimizer moments and activations each live in one arena (llm.c):
// memory is allocated once, first-touched once, and reused every step. On the CPU the
// backend maps arenas with transparent huge pages and pre-faults them, because first-touch
// faults of 4 KiB pages are expensive on virtual machines (docs/PERF.md, "Page faults").
// Not thread-safe. The arena must outlive every view carved from it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "ops/backend.h"

namespace fullband::ops {

class Arena {
 public:
  // Allocates `capacity` bytes on `backend` (RESOURCE_EXHAUSTED if that fails).
  static StatusOr<Arena> Create(Backend* backend, size_t capacity);

  Arena(Arena&& other) noexcept;
  Arena& operator=(Arena&& other) noexcept;
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  ~Arena();

  // A view of the next `shape` elements of `dtype`, 64-byte aligned. Running out of room is
  // a programmer error (arenas are sized from a table up front): FB_CHECK.
  Tensor Take(DType dtype, Shape shape);
  Tensor TakeF32(Shape shape) { return Take(DType::kF32, shape); }

  void Reset() { used_ = 0; }
  size_t used() const { return used_; }
  size_t capacity() const { return capacity_; }
  void* base() const { return base_; }

 private:
  Arena(Backend* backend, void* base, size_t capacity)
      : backend_(backend), base_(base), capacity_(capacity) {}

  Backend* backend_ = nullptr;
  void* base_ = nullptr;
  size_t capacity_ = 0;
  size_t used_ = 0;
};

}  // namespace fullband::ops

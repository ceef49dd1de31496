// Allocators for large buffers and tables.
//
// HugePageAllocator: a block of 1 MB or more is rounded up to whole 2 MB pages, aligned to
// 2 MB and marked MADV_HUGEPAGE, so that where transparent huge pages are enabled in `madvise`
// mode (Debian's default) the kernel backs it with 2 MB pages: one page fault per 2 MB instead
// of 512, and one TLB entry for lookups spread over 2 MB. On a virtual machine whose host
// shadows the guest's page tables a 4 KB page's first touch is expensive, so a fresh table of a
// few MB costs far more to touch in small pages than in huge ones (docs/PERF.md, "Page faults",
// times both). Smaller blocks come from the global operator new. Where huge pages are
// unavailable the advice is ignored and the block is ordinary memory.
//
// DefaultInit<A>: allocator A with resize() leaving new elements default-initialized (for
// chars and ints: unwritten, so not even touched), for buffers that are filled before they
// are read.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <new>
#include <utility>

namespace fullband {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

template <typename T>
struct HugePageAllocator {
  using value_type = T;

  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) {}  // NOLINT(google-explicit-constructor)

  static bool Huge(size_t n) { return n * sizeof(T) >= kHugePageBytes / 2; }

  T* allocate(size_t n) {
    if (!Huge(n)) return static_cast<T*>(::operator new(n * sizeof(T)));
    const size_t bytes = (n * sizeof(T) + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
    void* p = std::aligned_alloc(kHugePageBytes, bytes);
    if (p == nullptr) throw std::bad_alloc();
    madvise(p, bytes, MADV_HUGEPAGE);  // advice: where it fails the pages are small ones
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) {
    if (Huge(n)) {
      std::free(p);
    } else {
      ::operator delete(p);
    }
  }
  template <typename U>
  bool operator==(const HugePageAllocator<U>&) const {
    return true;
  }
};

template <typename A>
struct DefaultInit : A {
  template <typename U>
  struct rebind {
    using other = DefaultInit<typename std::allocator_traits<A>::template rebind_alloc<U>>;
  };
  using A::A;
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    if constexpr (sizeof...(Args) == 0) {
      ::new (static_cast<void*>(p)) U;
    } else {
      ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
    }
  }
};

template <typename T>
using UninitializedAllocator = DefaultInit<std::allocator<T>>;
template <typename T>
using UninitializedHugePageAllocator = DefaultInit<HugePageAllocator<T>>;

}  // namespace fullband

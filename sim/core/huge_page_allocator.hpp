#pragma once
// An allocator for the large, growing arrays of a step (its tasks and edges): blocks of at least
// HUGE_PAGE_BLOCK bytes are mapped directly and marked for transparent huge pages
// (madvise(MADV_HUGEPAGE)), so filling a 100 MB task array takes a few hundred page faults
// instead of tens of thousands; smaller blocks come from the heap. Contents and order of what is
// stored are unaffected (docs/performance.md, "Building the step").

#include <cstddef>
#include <new>

#include <sys/mman.h>

namespace stepsim {

/// Blocks from this size up are mapped with huge pages; below it, operator new.
inline constexpr std::size_t HUGE_PAGE_BLOCK = std::size_t{1} << 21; // 2 MiB

template <class T> class HugePageAllocator {
public:
  using value_type = T;

  HugePageAllocator() noexcept = default;
  template <class U> HugePageAllocator(const HugePageAllocator<U>& /*other*/) noexcept {}

  /// Throws std::bad_alloc when the memory cannot be had.
  T* allocate(std::size_t n) {
    const std::size_t bytes = n * sizeof(T);
    if (bytes < HUGE_PAGE_BLOCK)
      return static_cast<T*>(::operator new(bytes));
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
      throw std::bad_alloc();
    ::madvise(p, bytes, MADV_HUGEPAGE); // advice only: without THP the pages stay small
    return static_cast<T*>(p);
  }

  void deallocate(T* p, std::size_t n) noexcept {
    const std::size_t bytes = n * sizeof(T);
    if (bytes < HUGE_PAGE_BLOCK)
      ::operator delete(p);
    else
      ::munmap(p, bytes);
  }

  template <class U> bool operator==(const HugePageAllocator<U>& /*other*/) const noexcept { return true; }
};

} // namespace stepsim

#include "core/allocation_counter.h"

#include <atomic>
#include <cstdlib>
#include <new>

namespace sluice {
namespace {

std::atomic<uint64_t> allocations{0};

void Count() { allocations.fetch_add(1, std::memory_order_relaxed); }

void* Allocate(std::size_t size) {
  Count();
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}

void* AllocateAligned(std::size_t size, std::align_val_t align) {
  Count();
  const std::size_t a = static_cast<std::size_t>(align);
  // aligned_alloc wants a size that is a multiple of the alignment.
  if (void* p = std::aligned_alloc(a, (size + a - 1) / a * a)) return p;
  throw std::bad_alloc();
}

}  // namespace

uint64_t HeapAllocations() { return allocations.load(std::memory_order_relaxed); }

}  // namespace sluice

void* operator new(std::size_t size) { return sluice::Allocate(size); }
void* operator new[](std::size_t size) { return sluice::Allocate(size); }
void* operator new(std::size_t size, std::align_val_t align) {
  return sluice::AllocateAligned(size, align);
}
void* operator new[](std::size_t size, std::align_val_t align) {
  return sluice::AllocateAligned(size, align);
}
// The nothrow forms too: a library that asks for one (std::get_temporary_buffer does) must
// get memory from the same allocator the replaced operator delete gives back to.
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  sluice::Count();
  return std::malloc(size == 0 ? 1 : size);
}
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept {
  sluice::Count();
  return std::malloc(size == 0 ? 1 : size);
}
void* operator new(std::size_t size, std::align_val_t align, const std::nothrow_t&) noexcept {
  sluice::Count();
  const std::size_t a = static_cast<std::size_t>(align);
  return std::aligned_alloc(a, (size + a - 1) / a * a);
}
void* operator new[](std::size_t size, std::align_val_t align, const std::nothrow_t&) noexcept {
  sluice::Count();
  const std::size_t a = static_cast<std::size_t>(align);
  return std::aligned_alloc(a, (size + a - 1) / a * a);
}
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

// Counts heap allocations, for benchmarks that assert "zero allocations per request": linking
// //core:allocation_counter replaces the global operator new/delete with ones that count every
// allocation (new and new[], any alignment, throwing or nothrow) in a relaxed atomic, then call
// malloc/free.
//
//   const uint64_t before = sluice::HeapAllocations();
//   ... the code under measurement ...
//   const uint64_t allocations = sluice::HeapAllocations() - before;
//
// Only for benchmark and test binaries (the target is testonly): it adds a shared atomic
// increment to every allocation of the process.
//
// Thread-safety: thread-safe; the count is over all threads.
#ifndef SLUICE_CORE_ALLOCATION_COUNTER_H_
#define SLUICE_CORE_ALLOCATION_COUNTER_H_

#include <cstdint>

namespace sluice {

// Heap allocations made by the process since it started.
uint64_t HeapAllocations();

}  // namespace sluice

#endif  // SLUICE_CORE_ALLOCATION_COUNTER_H_

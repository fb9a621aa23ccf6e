// Byte comparison of short strings without a call: routes, method names, the fields of a
// response head. For strings of a few dozen bytes, memcmp's call and its length dispatch cost
// more than comparing eight bytes at a time inline; for long ones use memcmp.
//
//   if (sluice::BytesEqual(path, route.path_template)) ...
//
// Thread-safety: pure functions.
#ifndef SLUICE_CORE_BYTES_H_
#define SLUICE_CORE_BYTES_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace sluice {

// memcmp(a, b, n) == 0, inline and without a loop over the tail: words of eight bytes, the last
// one ending at the end (overlapping the one before); below eight bytes, two words of four or two
// that overlap the same way, or the one byte.
[[gnu::always_inline]] inline bool SameBytes(const char* a, const char* b, size_t n) {
  if (n >= 8) {
    uint64_t x, y;
    for (size_t at = 0; at + 8 < n; at += 8) {
      std::memcpy(&x, a + at, 8);
      std::memcpy(&y, b + at, 8);
      if (x != y) return false;
    }
    std::memcpy(&x, a + n - 8, 8);
    std::memcpy(&y, b + n - 8, 8);
    return x == y;
  }
  if (n >= 4) {
    uint32_t x, y, u, v;
    std::memcpy(&x, a, 4);
    std::memcpy(&y, b, 4);
    std::memcpy(&u, a + n - 4, 4);
    std::memcpy(&v, b + n - 4, 4);
    return ((x ^ y) | (u ^ v)) == 0;
  }
  if (n >= 2) {
    uint16_t x, y, u, v;
    std::memcpy(&x, a, 2);
    std::memcpy(&y, b, 2);
    std::memcpy(&u, a + n - 2, 2);
    std::memcpy(&v, b + n - 2, 2);
    return ((x ^ y) | (u ^ v)) == 0;
  }
  return n == 0 || a[0] == b[0];
}

// a == b, the bytes compared by SameBytes.
[[gnu::always_inline]] inline bool BytesEqual(std::string_view a, std::string_view b) {
  return a.size() == b.size() && SameBytes(a.data(), b.data(), a.size());
}

}  // namespace sluice

#endif  // SLUICE_CORE_BYTES_H_

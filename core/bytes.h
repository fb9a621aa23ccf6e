// Byte comparison and copies of short strings without a call: routes, method names, the fields of
// a response head, the strings of a telemetry record. For strings of a few dozen bytes, memcmp's
// call and its length dispatch cost more than comparing eight bytes at a time inline; for long ones
// use memcmp.
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

// The sizeof(Word) bytes at `p` as an unsigned word in host byte order (no alignment needed):
// for word-at-a-time scans and compares.
template <typename Word>
inline Word LoadWord(const char* p) {
  Word w;
  std::memcpy(&w, p, sizeof(w));
  return w;
}
namespace bytes_internal {

// For sizeof(Word) <= n <= 2 * sizeof(Word): the first and the last Word of a and b are equal
// (together they cover all n bytes, overlapping when n < 2 * sizeof(Word)).
template <typename Word>
[[gnu::always_inline]] inline bool SameEnds(const char* a, const char* b, size_t n) {
  Word x, y, u, v;
  std::memcpy(&x, a, sizeof(Word));
  std::memcpy(&y, b, sizeof(Word));
  std::memcpy(&u, a + n - sizeof(Word), sizeof(Word));
  std::memcpy(&v, b + n - sizeof(Word), sizeof(Word));
  return ((x ^ y) | (u ^ v)) == 0;
}

}  // namespace bytes_internal

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
  if (n >= 4) return bytes_internal::SameEnds<uint32_t>(a, b, n);
  if (n >= 2) return bytes_internal::SameEnds<uint16_t>(a, b, n);
  return n == 0 || a[0] == b[0];
}

// memcpy(dst, src, n), inline for n <= 16: two loads and two stores of a word that overlap when n
// is not the word's size, or the one byte; longer copies call memcpy. For the many short strings a
// record copies (a method, an address, a route), where memcpy's call and size dispatch cost more
// than the copy. The ranges must not overlap.
[[gnu::always_inline]] inline void CopyBytes(char* dst, const char* src, size_t n) {
  auto two = [&](auto word) {
    decltype(word) head, tail;
    std::memcpy(&head, src, sizeof(head));
    std::memcpy(&tail, src + n - sizeof(tail), sizeof(tail));
    std::memcpy(dst, &head, sizeof(head));
    std::memcpy(dst + n - sizeof(tail), &tail, sizeof(tail));
  };
  if (n > 16) {
    std::memcpy(dst, src, n);
  } else if (n >= 8) {
    two(uint64_t{});
  } else if (n >= 4) {
    two(uint32_t{});
  } else if (n >= 2) {
    two(uint16_t{});
  } else if (n == 1) {
    dst[0] = src[0];
  }
}

// a == b, the bytes compared by SameBytes.
[[gnu::always_inline]] inline bool BytesEqual(std::string_view a, std::string_view b) {
  return a.size() == b.size() && SameBytes(a.data(), b.data(), a.size());
}

}  // namespace sluice

#endif  // SLUICE_CORE_BYTES_H_

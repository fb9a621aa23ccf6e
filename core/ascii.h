// ASCII case for protocol text: header names, schemes, host names, tokens and list options, which
// the RFCs compare without regard to ASCII case. Only 'A'..'Z' fold; every other byte (digits,
// punctuation, controls, bytes >= 0x80) compares as it is, so '\r' never matches '-'. Not for
// human-language text.
//
//   sluice::EqualsLowercase(field.name, "content-length");   // the hot form: a lowercase literal
//   sluice::EqualsIgnoreCase(authority_a, authority_b);      // both sides as sent
//
// Thread-safety: pure functions.
#ifndef SLUICE_CORE_ASCII_H_
#define SLUICE_CORE_ASCII_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>

namespace sluice {

constexpr char AsciiLower(char c) {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c + ('a' - 'A')) : c;
}

// Whether `s` holds a letter 'A'..'Z'. At run time a string of eight bytes or more is read as
// words of eight, the last one ending at its end (overlapping the one before): every response's
// header names are asked.
constexpr bool HasAsciiUppercase(std::string_view s) {
  if (std::is_constant_evaluated() || s.size() < 8) {
    for (char c : s) {
      if (c >= 'A' && c <= 'Z') return true;
    }
    return false;
  }
  // Per byte b < 0x80 (no carry between bytes): b + 0x3f has its high bit from 'A' up, b + 0x25
  // from past 'Z' up; a byte with its own high bit set is no letter.
  constexpr uint64_t kLow7 = 0x7f7f7f7f7f7f7f7f;
  constexpr uint64_t kHigh = 0x8080808080808080;
  auto word_has = [](uint64_t x) {
    const uint64_t low = x & kLow7;
    return ((low + 0x3f3f3f3f3f3f3f3f) & ~(low + 0x2525252525252525) & ~x & kHigh) != 0;
  };
  const size_t n = s.size();
  uint64_t word;
  for (size_t at = 0; at + 8 < n; at += 8) {
    std::memcpy(&word, s.data() + at, 8);
    if (word_has(word)) return true;
  }
  std::memcpy(&word, s.data() + n - 8, 8);
  return word_has(word);
}

// Whether `s`, with its letters lowered, is `lower`. `lower` must hold no uppercase letter (a
// literal such as "content-length"): only `s` is folded.
constexpr bool EqualsLowercase(std::string_view s, std::string_view lower) {
  if (s.size() != lower.size()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (AsciiLower(s[i]) != lower[i]) return false;
  }
  return true;
}

// Whether `a` and `b` are equal without regard to ASCII case (both folded).
constexpr bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (AsciiLower(a[i]) != AsciiLower(b[i])) return false;
  }
  return true;
}

// Appends `s` to `*out` with its letters lowered.
inline void AppendAsciiLower(std::string_view s, std::string* out) {
  for (char c : s) out->push_back(AsciiLower(c));
}

}  // namespace sluice

#endif  // SLUICE_CORE_ASCII_H_

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

#include <string>
#include <string_view>

namespace sluice {

constexpr char AsciiLower(char c) {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c + ('a' - 'A')) : c;
}

constexpr bool HasAsciiUppercase(std::string_view s) {
  for (char c : s) {
    if (c >= 'A' && c <= 'Z') return true;
  }
  return false;
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

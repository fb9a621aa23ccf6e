#include "http1/field.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace sluice::http1 {

namespace {

bool IsOws(char c) { return c == ' ' || c == '\t'; }

constexpr uint64_t kOnes = 0x0101010101010101;
constexpr uint64_t kHighBits = 0x8080808080808080;

// Nonzero if some byte of `w` is below `n` (n <= 128). Exact as a whole; which bits are set is
// not (a borrow can flag a neighbour), so callers only test it for zero.
constexpr uint64_t HasByteBelow(uint64_t w, uint8_t n) { return (w - kOnes * n) & ~w & kHighBits; }
// Nonzero if some byte of `w` equals `b`.
constexpr uint64_t HasByte(uint64_t w, uint8_t b) { return HasByteBelow(w ^ (kOnes * b), 1); }

uint64_t Load64(const char* p) {
  uint64_t w;
  std::memcpy(&w, p, sizeof(w));
  return w;
}

// Skips whole 8-byte words for which `suspicious` is zero, then finds the exact byte with
// `valid`. `suspicious` may flag valid bytes (a word with HTAB in a value), never miss an invalid
// one.
template <typename Suspicious, typename Valid>
size_t FindInvalid(std::string_view s, Suspicious suspicious, Valid valid) {
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    if (suspicious(Load64(s.data() + i)) == 0) continue;
    for (size_t j = i; j < i + 8; ++j) {
      if (!valid(static_cast<uint8_t>(s[j]))) return j;
    }
  }
  for (; i < s.size(); ++i) {
    if (!valid(static_cast<uint8_t>(s[i]))) return i;
  }
  return s.size();
}

}  // namespace

size_t FindInvalidFieldValueChar(std::string_view s) {
  // Refused: controls (< 0x20, HTAB aside) and DEL. obs-text (>= 0x80) is allowed.
  return FindInvalid(
      s, [](uint64_t w) { return HasByteBelow(w, 0x20) | HasByte(w, 0x7f); }, IsFieldValueChar);
}

size_t FindInvalidTargetChar(std::string_view s) {
  // Allowed: 0x21..0x7e except '#'.
  return FindInvalid(
      s,
      [](uint64_t w) {
        return HasByteBelow(w, 0x21) | (w & kHighBits) | HasByte(w, 0x7f) | HasByte(w, '#');
      },
      IsTargetChar);
}

bool IsToken(std::string_view s) {
  if (s.empty()) return false;
  // The class bytes of four characters ANDed, one test per four: a name is nearly always a token,
  // so stopping early at a bad byte saves nothing worth a branch per byte.
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const std::array<uint8_t, 256>& cls = field_internal::kByteClass;
  uint8_t all = 1;
  size_t i = 0;
  for (; i + 4 <= s.size(); i += 4) {
    all &= cls[p[i]] & cls[p[i + 1]] & cls[p[i + 2]] & cls[p[i + 3]];
  }
  for (; i < s.size(); ++i) all &= cls[p[i]];
  return (all & 1) != 0;
}

std::string_view TrimOws(std::string_view s) {
  size_t begin = 0;
  size_t end = s.size();
  while (begin < end && IsOws(s[begin])) ++begin;
  while (end > begin && IsOws(s[end - 1])) --end;
  return {s.data() + begin, end - begin};
}

std::string_view NextListElement(std::string_view* list) {
  const size_t comma = list->find(',');
  std::string_view element = list->substr(0, comma);
  if (comma == std::string_view::npos) {
    *list = {};
  } else {
    list->remove_prefix(comma + 1);
  }
  return TrimOws(element);
}

std::string_view ParseFieldLine(std::string_view line, Header* out) {
  if (line.empty()) return "empty field line";
  if (IsOws(line.front())) return "obs-fold (line folding) in field section";
  size_t i = 0;
  while (i < line.size() && IsTokenChar(static_cast<uint8_t>(line[i]))) ++i;
  if (i == line.size()) return "field line without a colon";
  if (line[i] != ':') {
    return IsOws(line[i]) ? std::string_view("whitespace between field name and colon")
                          : std::string_view("invalid character in field name");
  }
  if (i == 0) return "empty field name";
  const std::string_view name = line.substr(0, i);
  std::string_view value = line.substr(i + 1);
  if (const size_t bad = FindInvalidFieldValueChar(value); bad != value.size()) {
    return value[bad] == '\r' ? std::string_view("bare CR in field value")
                              : std::string_view("invalid character in field value");
  }
  out->name = name;
  out->value = TrimOws(value);
  return {};
}

}  // namespace sluice::http1

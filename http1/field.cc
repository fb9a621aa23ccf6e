#include "http1/field.h"

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "core/bytes.h"

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

// The first byte of the 8 at `p` that `valid` refuses among those whose high bit is set in
// `flagged` (a `suspicious` mask), or 8. Visits only the flagged bytes, in address order (on a
// little-endian machine the lowest bit is the first byte).
template <typename Valid>
size_t FirstInvalidFlagged(const char* p, uint64_t flagged, Valid valid) {
  if constexpr (std::endian::native == std::endian::little) {
    for (; flagged != 0; flagged &= flagged - 1) {
      const size_t k = static_cast<size_t>(std::countr_zero(flagged)) / 8;
      if (!valid(static_cast<uint8_t>(p[k]))) return k;
    }
  } else {
    for (size_t k = 0; k < 8; ++k) {
      if (!valid(static_cast<uint8_t>(p[k]))) return k;
    }
  }
  return 8;
}

// Skips whole 8-byte words for which `suspicious` is zero, then finds the exact byte with
// `valid`. `suspicious` sets the high bit of every byte it flags; it may flag valid bytes (a word
// with HTAB in a value, or a byte above one flagged), never miss an invalid one. A tail shorter
// than a word is taken as the string's last 8 bytes, the ones already checked masked off.
template <typename Suspicious, typename Valid>
size_t FindInvalid(std::string_view s, Suspicious suspicious, Valid valid) {
  const size_t n = s.size();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t flagged = suspicious(LoadWord<uint64_t>(s.data() + i));
    if (flagged == 0) continue;
    const size_t k = FirstInvalidFlagged(s.data() + i, flagged, valid);
    if (k < 8) return i + k;
  }
  if (i == n) return n;
  if (std::endian::native == std::endian::little && n >= 8) {
    const size_t checked = i - (n - 8);  // 1..7 bytes of the last word
    const uint64_t flagged =
        suspicious(LoadWord<uint64_t>(s.data() + n - 8)) & (~uint64_t{0} << (8 * checked));
    if (flagged == 0) return n;
    const size_t k = FirstInvalidFlagged(s.data() + n - 8, flagged, valid);
    return k < 8 ? n - 8 + k : n;
  }
  for (; i < n; ++i) {
    if (!valid(static_cast<uint8_t>(s[i]))) return i;
  }
  return n;
}

#if defined(__SSE2__)
// 16 bytes at a time where SSE2 is there (every x86-64): the bits of the bytes at `p` that a
// field value refuses (controls, DEL), HTAB included: the caller skips that one.
uint32_t SuspiciousValueBytes16(const char* p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  // v >= 0x20, unsigned: max(v, 0x20) == v.
  const __m128i printable = _mm_cmpeq_epi8(_mm_max_epu8(v, _mm_set1_epi8(0x20)), v);
  const __m128i del = _mm_cmpeq_epi8(v, _mm_set1_epi8(0x7f));
  return (static_cast<uint32_t>(_mm_movemask_epi8(printable)) ^ 0xffffu) |
         static_cast<uint32_t>(_mm_movemask_epi8(del));
}

// The bits of the bytes at `p` that a request-target refuses, and of its '?' with `question`.
uint32_t SuspiciousTargetBytes16(const char* p, bool question) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  // 0x21..0x7f as signed bytes: above 0x20 and not negative (obs-text is refused here).
  const __m128i in_range = _mm_cmpgt_epi8(v, _mm_set1_epi8(0x20));
  __m128i refused =
      _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8(0x7f)), _mm_cmpeq_epi8(v, _mm_set1_epi8('#')));
  if (question) refused = _mm_or_si128(refused, _mm_cmpeq_epi8(v, _mm_set1_epi8('?')));
  return (static_cast<uint32_t>(_mm_movemask_epi8(in_range)) ^ 0xffffu) |
         static_cast<uint32_t>(_mm_movemask_epi8(refused));
}
#endif

}  // namespace

size_t FindInvalidFieldValueChar(std::string_view s) {
  // Refused: controls (< 0x20, HTAB aside) and DEL. obs-text (>= 0x80) is allowed.
  return FindInvalid(
      s, [](uint64_t w) { return HasByteBelow(w, 0x20) | HasByte(w, 0x7f); }, IsFieldValueChar);
}

namespace {

// Allowed in a target: 0x21..0x7e except '#'.
constexpr uint64_t SuspiciousTargetWord(uint64_t w) {
  return HasByteBelow(w, 0x21) | (w & kHighBits) | HasByte(w, 0x7f) | HasByte(w, '#');
}

}  // namespace

size_t FindInvalidTargetChar(std::string_view s) {
  return FindInvalid(s, SuspiciousTargetWord, IsTargetChar);
}

size_t FindInvalidTargetChar(std::string_view s, size_t* question_mark) {
  const char* const p = s.data();
  const size_t n = s.size();
  size_t question = n;
  size_t i = 0;
#if defined(__SSE2__)
  // 16 bytes at a time; until the first '?' is found, a '?' is suspicious too.
  while (i + 16 <= n) {
    const uint32_t flagged = SuspiciousTargetBytes16(p + i, question == n);
    if (flagged == 0) {
      i += 16;
      continue;
    }
    i += static_cast<size_t>(std::countr_zero(flagged));
    if (p[i] == '?' && question == n) {
      question = i++;
      continue;
    }
    *question_mark = question;
    return i;  // every other flagged byte is refused
  }
#endif
  if constexpr (std::endian::native == std::endian::little) {
    // A word at a time, as above. The lowest byte a mask flags is exact (a borrow only flags
    // bytes above a real one), so the first suspicious byte is found with one count of trailing
    // zeros.
    while (i + 8 <= n) {
      const uint64_t w = LoadWord<uint64_t>(p + i);
      uint64_t flagged = SuspiciousTargetWord(w);
      if (question == n) flagged |= HasByte(w, '?');
      if (flagged == 0) {
        i += 8;
        continue;
      }
      i += static_cast<size_t>(std::countr_zero(flagged)) / 8;
      if (p[i] == '?' && question == n) {
        question = i++;
        continue;
      }
      if (!IsTargetChar(static_cast<uint8_t>(p[i]))) {
        *question_mark = question;
        return i;
      }
      ++i;  // not reached: a flagged byte other than the first '?' is invalid
    }
  }
  for (; i < n; ++i) {
    if (!IsTargetChar(static_cast<uint8_t>(p[i]))) break;
    if (p[i] == '?' && question == n) question = i;
  }
  *question_mark = question;
  return i;
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

std::string_view ParseFieldLineUntilCrlf(std::string_view input, Header* out, size_t* line_size) {
  // ParseFieldLine's checks in its order; where it looks at the end of the line, a CR here is
  // that end only when an LF follows it.
  const char* const p = input.data();
  const size_t n = input.size();
  const auto crlf_at = [p, n](size_t i) { return i + 1 < n && p[i] == '\r' && p[i + 1] == '\n'; };
  size_t i = 0;
  while (i < n && IsTokenChar(static_cast<uint8_t>(p[i]))) ++i;
  if (i == 0) {
    // What a line that does not start with a name is, in ParseFieldLine's order (a line that
    // does cannot be empty or folded).
    if (n == 0) return "malformed header section";
    if (crlf_at(0)) return "empty field line";
    if (IsOws(p[0])) return "obs-fold (line folding) in field section";
  }
  if (i == n) return "malformed header section";
  if (p[i] != ':') {
    if (crlf_at(i)) return "field line without a colon";
    if (p[i] == '\n') return "bare LF line ending";
    return IsOws(p[i]) ? std::string_view("whitespace between field name and colon")
                       : std::string_view("invalid character in field name");
  }
  if (i == 0) return "empty field name";
  // The value, leading OWS skipped (valid bytes); CR is not a field value byte, so the scan
  // stops at the line's end if not before.
  size_t value_start = i + 1;
  // Usually one space, then the value.
  if (value_start < n && p[value_start] == ' ') ++value_start;
  while (value_start < n && IsOws(p[value_start])) ++value_start;
  // The first byte IsFieldValueChar refuses: FindInvalidFieldValueChar, inline. A word at a time
  // (the lowest byte the mask flags is exact, and only HTAB among those is valid), the last few
  // bytes one at a time.
  size_t bad = value_start;
  while (true) {
#if defined(__SSE2__)
    if (bad + 16 <= n) {
      const uint32_t flagged = SuspiciousValueBytes16(p + bad);
      if (flagged == 0) {
        bad += 16;
        continue;
      }
      bad += static_cast<size_t>(std::countr_zero(flagged));
      if (p[bad] != '\t') break;
      ++bad;  // HTAB: valid in a value
      continue;
    }
#endif
    if (std::endian::native == std::endian::little && bad + 8 <= n) {
      const uint64_t w = LoadWord<uint64_t>(p + bad);
      const uint64_t flagged = HasByteBelow(w, 0x20) | HasByte(w, 0x7f);
      if (flagged == 0) {
        bad += 8;
        continue;
      }
      bad += static_cast<size_t>(std::countr_zero(flagged)) / 8;
    } else {
      while (bad < n && IsFieldValueChar(static_cast<uint8_t>(p[bad]))) ++bad;
      if (bad == n) return "malformed header section";
    }
    if (p[bad] != '\t') break;
    ++bad;  // HTAB: valid in a value
  }
  if (p[bad] == '\r') {
    if (bad + 1 == n || p[bad + 1] != '\n') return "bare CR in field value";
  } else {
    return p[bad] == '\n' ? std::string_view("bare LF line ending")
                          : std::string_view("invalid character in field value");
  }
  size_t value_end = bad;
  while (value_end > value_start && IsOws(p[value_end - 1])) --value_end;
  out->name = {p, i};
  out->value = {p + value_start, value_end - value_start};
  *line_size = bad + 2;
  return {};
}

}  // namespace sluice::http1

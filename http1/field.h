// HTTP fields (headers and trailers) as HTTP/1.1 carries them: the `Header` view type and the
// RFC 9110 syntax checks shared by the request parser, the chunked decoder (trailers) and the
// response writer (which refuses to emit what the parser would refuse to accept).
//
//   sluice::http1::Header h;
//   std::string_view error = sluice::http1::ParseFieldLine("Host: example.com", &h);
//   // error.empty(), h.name == "Host", h.value == "example.com"
//   sluice::EqualsLowercase(h.name, "host");  // true (names compare as core/ascii.h does)
//
// Thread-safety: stateless functions and a value type; thread-safe.
#ifndef SLUICE_HTTP1_FIELD_H_
#define SLUICE_HTTP1_FIELD_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace sluice::http1 {

// One field line. Both views point into memory owned by whoever produced the Header (the
// parser's input or scratch, the decoder's trailer buffer, or the caller); see the producer
// for how long they stay valid.
struct Header {
  std::string_view name;
  std::string_view value;

  friend bool operator==(const Header&, const Header&) = default;
};

namespace field_internal {
// Bit 0: tchar (RFC 9110 §5.6.2). Bit 1: a byte allowed in a field value (VCHAR, obs-text,
// SP, HTAB; RFC 9110 §5.5). Bit 2: a byte allowed in a request-target (VCHAR except '#').
inline constexpr std::array<uint8_t, 256> kByteClass = [] {
  std::array<uint8_t, 256> table{};
  for (int c = 0; c < 256; ++c) {
    const bool alnum = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    const bool tchar_symbol =
        std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos;
    const bool vchar = c >= 0x21 && c <= 0x7e;
    uint8_t bits = 0;
    if (alnum || tchar_symbol) bits |= 1;
    if (vchar || c >= 0x80 || c == ' ' || c == '\t') bits |= 2;
    if (vchar && c != '#') bits |= 4;
    table[static_cast<size_t>(c)] = bits;
  }
  return table;
}();
}  // namespace field_internal

// A token character (RFC 9110 §5.6.2): what methods, field names and coding names are made of.
constexpr bool IsTokenChar(uint8_t c) { return (field_internal::kByteClass[c] & 1) != 0; }

// A byte a field value may contain (RFC 9110 §5.5): VCHAR, obs-text, SP or HTAB. Excludes NUL,
// CR, LF, DEL and every other control character.
constexpr bool IsFieldValueChar(uint8_t c) { return (field_internal::kByteClass[c] & 2) != 0; }

// A byte a request-target may contain: VCHAR except '#' (no whitespace, controls, DEL, non-ASCII
// or fragment).
constexpr bool IsTargetChar(uint8_t c) { return (field_internal::kByteClass[c] & 4) != 0; }

// The index of the first byte of `s` that IsFieldValueChar refuses, or s.size(). Checks eight
// bytes at a time: the hot loop of header parsing.
size_t FindInvalidFieldValueChar(std::string_view s);

// The index of the first byte of `s` that IsTargetChar refuses, or s.size().
size_t FindInvalidTargetChar(std::string_view s);

// FindInvalidTargetChar that also finds the query: sets *question_mark to the index of the first
// '?' of `s` before the byte returned (s.size() if there is none there). One pass over a request
// target validates it and splits its path from its query.
size_t FindInvalidTargetChar(std::string_view s, size_t* question_mark);

// True if `s` is a non-empty token.
bool IsToken(std::string_view s);

// Strips leading and trailing SP/HTAB (OWS, RFC 9110 §5.6.3).
std::string_view TrimOws(std::string_view s);

// Splits the next element off a comma-separated list (RFC 9110 §5.6.1): returns it with OWS
// trimmed and removes it and its comma from *list. Empty elements are returned as empty views;
// callers skip them, as the RFC requires.
std::string_view NextListElement(std::string_view* list);

// Parses one field line without its CRLF ("Name: value"): a non-empty token, a colon with no
// whitespace before it, and a value of IsFieldValueChar bytes with surrounding OWS removed.
// Returns "" and fills *out (views into `line`) on success, or a short static reason on failure:
// obs-fold (line starts with SP/HTAB), whitespace before the colon, a bad name character, a
// missing colon, or a bad value byte (NUL, bare CR, LF, other controls, DEL).
std::string_view ParseFieldLine(std::string_view line, Header* out);

// Parses the field line at the start of `input` that ends at the first CRLF: the same checks and
// reasons as ParseFieldLine on the line without its CRLF, where every LF of `input` up to that
// CRLF must follow a CR ("bare LF line ending" otherwise). The line's end is found by the scan of
// its value for invalid bytes, not by a search of its own. Returns "" and fills *out and
// *line_size (the line's bytes with its CRLF) on success, or a short static reason on failure:
// the reasons of ParseFieldLine, "bare LF line ending", or "malformed header section" when
// `input` holds no CRLF (but a lone CR at its end is "bare CR in field value"; the head scanner
// never passes such an input).
std::string_view ParseFieldLineUntilCrlf(std::string_view input, Header* out, size_t* line_size);

}  // namespace sluice::http1

#endif  // SLUICE_HTTP1_FIELD_H_

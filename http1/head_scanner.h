// The HTTP/1.1 head scanner (RFC 9112) the request parser and the response parser are both built
// on: it finds the end of a head (start line, field lines, empty line) across the segments of a
// BufferSequence, enforcing the size limits as it goes, and hands the complete head over in one
// piece: in place when it lies in one segment, copied into the scanner's scratch otherwise (only
// the head, bounded by the limits). It also parses the field lines, and the fields that frame a
// message (Content-Length, Transfer-Encoding, Connection), the same way for both sides.
//
// What differs between a request and a response, the start line and what a complete head means,
// is a template parameter of Scan (so the hot path has no virtual call). It looks like this:
//
//   struct StatusLine {
//     using Outcome = ResponseParseOutcome;  // Outcome{} is incomplete()
//     // The parser's error for a fault the scanner found (counts it).
//     Outcome Fail(HeadFault fault);
//     // Validates a complete start line, without CRLF: incomplete() means "valid, go on".
//     Outcome CheckStartLine(std::string_view line);
//     // The head is complete: parse it (ParseFieldLines) into the caller's head. incomplete()
//     // means "skip it and scan the next head right after" (an interim 1xx response).
//     Outcome Head(const ScannedHead& head);
//   };
//
//   HeadScanner scanner({.max_start_line = 8192, .max_header_bytes = 65536,
//                        .max_header_count = 100});
//   StatusLine line{...};
//   ResponseParseOutcome r = scanner.Scan(read.buffer, offset, read.buffer.size(), line);
//
// Every outcome other than incomplete() ends the scan: the next Scan starts a new head.
//
// Thread-safety: thread-compatible. A scanner belongs to one parser (its scratch buffer and
// resume state are per connection).
#ifndef SLUICE_HTTP1_HEAD_SCANNER_H_
#define SLUICE_HTTP1_HEAD_SCANNER_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "core/ascii.h"
#include "http1/field.h"

namespace sluice::http1 {

// The limits a scanner enforces. Every size is in bytes.
struct HeadScanLimits {
  // Longest start line, without its CRLF.
  size_t max_start_line = 8 * 1024;
  // Largest header section: the field lines with their CRLFs plus the final empty line.
  size_t max_header_bytes = 32 * 1024;
  // Most field lines in one head.
  size_t max_header_count = 100;
  // Empty lines (CRLF) skipped before a start line; one more is HeadFault::kTooManyEmptyLines.
  size_t max_leading_empty_lines = 0;
};

// What the scanner refuses, for the parser to answer in its own terms (code, reason, counter).
enum class HeadFault : uint8_t {
  kOffsetPastEnd,          // Scan was given an offset past the end of its input (a caller bug)
  kStartLineTooLong,       // max_start_line, also while the line is incomplete
  kHeaderSectionTooLarge,  // max_header_bytes, also while the section is incomplete
  kTooManyFields,          // max_header_count
  kTooManyEmptyLines,      // max_leading_empty_lines
  kBareLf,                 // a line not ended by CRLF (a bare LF, or a CR that is not before LF)
};

// A complete head, as Scan hands it to StartLine::Head.
struct ScannedHead {
  // The head, contiguous: start line, CRLF, field lines with their CRLFs, the final CRLF.
  const char* bytes = nullptr;
  size_t size = 0;
  // The start line's length without its CRLF: the field lines start 2 bytes after.
  size_t start_line_size = 0;
  // Where the head ends, counted from the offset given to Scan (skipped heads included).
  size_t end = 0;
  // Heads skipped (Head returned incomplete) before this one in the same scan.
  uint32_t skipped = 0;
  // The head spanned segments and `bytes` is a copy in the scanner's scratch.
  bool linearized = false;

  std::string_view start_line() const { return {bytes, start_line_size}; }
};

// Contiguous bytes shaped like a BufferSequence (one chunk, and CopyTo), so one Scan template
// serves the parsers' string_view overloads too. Views into it point into `bytes`.
class ContiguousInput {
 public:
  explicit ContiguousInput(std::string_view bytes)
      : bytes_(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()) {}

  const std::span<const uint8_t>* begin() const { return &bytes_; }
  const std::span<const uint8_t>* end() const { return &bytes_ + (bytes_.empty() ? 0 : 1); }
  size_t CopyTo(size_t offset, std::span<uint8_t> out) const;

 private:
  std::span<const uint8_t> bytes_;
};

// The fields that decide how a message's body is framed and whether the connection carries
// another message: Content-Length, Transfer-Encoding (RFC 9112 §6) and Connection (§9.3),
// gathered one field line at a time. The repetitions and conflicts that request smuggling and
// response splitting feed on are refused; what a valid combination means is left to the parser.
class FramingFields {
 public:
  // Whether a transfer coding may follow chunked. A request must end with chunked (RFC 9112
  // §6.3 rule 4); a response may not, and is then read until the connection closes.
  enum class CodingAfterChunked : uint8_t { kRefused, kAllowed };

  explicit FramingFields(CodingAfterChunked after_chunked) : after_chunked_(after_chunked) {}

  // Takes one field line; fields other than the three are ignored. Returns "" or a static reason
  // the line is refused: a repeated (even if equal) or non-numeric Content-Length, an empty
  // Transfer-Encoding, chunked applied twice, a coding after chunked when refused, a coding that
  // is not a token.
  std::string_view Take(const Header& field) {
    // Told apart by length first: most fields are none of these.
    switch (field.name.size()) {
      case 10:
        if (EqualsLowercase(field.name, "connection")) TakeConnection(field.value);
        break;
      case 14:
        if (EqualsLowercase(field.name, "content-length")) {
          return TakeContentLength(field.value);
        }
        break;
      case 17:
        if (EqualsLowercase(field.name, "transfer-encoding")) {
          return TakeTransferEncoding(field.value);
        }
        break;
      default:
        break;
    }
    return {};
  }

  // Returns "" or the reason Transfer-Encoding conflicts with the rest of the head: it comes with
  // Content-Length, or in an HTTP/1.0 message (then `in_http10` is the reason).
  std::string_view Conflict(uint8_t version_minor, std::string_view in_http10) const;

  // Whether the connection stays open after this message, by version and Connection options:
  // HTTP/1.1 unless "close"; HTTP/1.0 only with "keep-alive" and no "close".
  bool KeepAlive(uint8_t version_minor) const {
    return version_minor == 1 ? !connection_close_ : connection_keep_alive_ && !connection_close_;
  }

  bool content_length_seen() const { return content_length_seen_; }
  // The Content-Length value; 0 when there was none.
  uint64_t content_length() const { return content_length_; }
  bool transfer_encoding_seen() const { return transfer_encoding_seen_; }
  // The last transfer coding is chunked.
  bool chunked_last() const { return chunked_last_; }
  // A coding other than chunked was named.
  bool other_coding() const { return other_coding_; }

 private:
  void TakeConnection(std::string_view value);
  std::string_view TakeContentLength(std::string_view value);
  std::string_view TakeTransferEncoding(std::string_view value);

  const CodingAfterChunked after_chunked_;
  bool content_length_seen_ = false;
  uint64_t content_length_ = 0;
  bool transfer_encoding_seen_ = false;
  bool chunked_seen_ = false;
  bool chunked_last_ = false;
  bool other_coding_ = false;
  bool connection_close_ = false;
  bool connection_keep_alive_ = false;
};

// Parses the field lines that start `*pos` bytes into `bytes`, up to and including the empty line
// that ends them, all within bytes[0, size): appends each to *headers in order, names as sent and
// values with surrounding whitespace removed. Every line must be a valid field line
// (ParseFieldLine) ending in CRLF, and is found by parsing it (ParseFieldLineUntilCrlf): there is
// no separate search for line ends. Each goes to framing->Take and then to `on_field(const
// Header&)`, which returns "" or a static reason to refuse it (the parser's own fields: Host,
// Expect). Returns "" with *pos just past the empty line, or the reason for the first line
// refused; input that ends before the empty line is refused too ("malformed header section", or
// the reason its last, cut line gets), so a caller that is not sure the section is complete
// cannot tell that from an invalid one.
template <typename OnField>
std::string_view ParseFieldSection(const char* bytes, size_t size, size_t* pos,
                                   FramingFields* framing, std::vector<Header>* headers,
                                   OnField&& on_field) {
  size_t p = *pos;
  while (true) {
    if (size - p >= 2 && bytes[p] == '\r' && bytes[p + 1] == '\n') {
      *pos = p + 2;
      return {};
    }
    Header h;
    size_t line_size = 0;
    std::string_view bad = ParseFieldLineUntilCrlf({bytes + p, size - p}, &h, &line_size);
    if (!bad.empty()) return bad;
    p += line_size;
    bad = framing->Take(h);
    if (bad.empty()) bad = on_field(h);
    if (!bad.empty()) return bad;
    headers->push_back(h);
  }
}

// ParseFieldSection over the field lines of a complete `head` (between the start line and the
// final CRLF). The scan saw every LF of the head preceded by a CR and ended it at its first empty
// line, so parsing the lines reaches exactly the head's end. Bounding the input by the head keeps
// a broken Parse contract (input that changed under a resumed scan) from reading out of bounds.
template <typename OnField>
std::string_view ParseFieldLines(const ScannedHead& head, FramingFields* framing,
                                 std::vector<Header>* headers, OnField&& on_field) {
  size_t pos = head.start_line_size + 2;
  const std::string_view bad = ParseFieldSection(head.bytes, head.size, &pos, framing, headers,
                                                 std::forward<OnField>(on_field));
  if (!bad.empty()) return bad;
  if (pos != head.size) return "malformed header section";
  return {};
}

// The value of the first of `fields` named `name` (ASCII case-insensitive; `name` lowercase as for
// EqualsLowercase), or an empty view if there is none: the Find of both heads.
std::string_view FindField(const std::vector<Header>& fields, std::string_view name);

class HeadScanner {
 public:
  explicit HeadScanner(HeadScanLimits limits) : limits_(limits) {}
  HeadScanner(const HeadScanner&) = delete;
  HeadScanner& operator=(const HeadScanner&) = delete;

  // Scans the head that starts `offset` bytes into `chunks` (a BufferSequence or a
  // ContiguousInput of `size` bytes), calling `start_line` as the file comment says.
  //
  // Returns incomplete when the head has not ended yet and no limit is broken; otherwise what
  // start_line returned (from Fail, CheckStartLine or Head), which ends the scan. An `offset`
  // past the end is start_line.Fail(kOffsetPastEnd).
  //
  // Resumption: after an incomplete outcome the scanner remembers how far it looked (heads
  // already skipped included), so feeding a head one byte at a time costs O(head size) in total.
  // The next call must pass input that continues the same bytes from its `offset`; input shorter
  // than what was scanned starts over. Reset() forgets the resume state.
  template <typename Chunks, typename StartLine>
  typename StartLine::Outcome Scan(const Chunks& chunks, size_t offset, size_t size,
                                   StartLine& start_line);

  void Reset() { state_ = State(); }

  // Whether the scanner holds the resume state of an incomplete head: the next Scan continues it.
  bool resuming() const { return state_.scanned != 0; }

 private:
  // Where the search for the end of the head got to, relative to the `offset` given to Scan.
  // Kept between calls while the head is incomplete.
  struct State {
    size_t scanned = 0;        // bytes examined so far
    size_t line_start = 0;     // first byte of the line being scanned
    size_t head_start = 0;     // first byte of the start line (after empty lines, skipped heads)
    size_t headers_start = 0;  // first byte after the start line's CRLF (when in_headers)
    size_t empty_lines = 0;    // empty lines skipped before the start line
    size_t field_lines = 0;    // field lines of the current head
    uint32_t skipped = 0;      // heads skipped
    bool in_headers = false;   // the start line has been seen and validated
    char last = 0;             // input[scanned - 1]: a CR before an LF in the next chunk
  };

  // Scans one chunk from state_.scanned to its end. `data` holds the chunk's bytes from
  // position `chunk_first` (<= state_.scanned) on, `chunk_len` of them.
  template <typename Chunks, typename StartLine>
  typename StartLine::Outcome ScanChunk(const Chunks& chunks, size_t offset, const char* data,
                                        size_t chunk_first, size_t chunk_len,
                                        StartLine& start_line);
  // Returns scratch of at least `size` bytes; views into earlier contents are invalidated.
  char* Scratch(size_t size);

  const HeadScanLimits limits_;
  State state_;
  std::unique_ptr<char[]> scratch_;
  size_t scratch_size_ = 0;
};

template <typename Chunks, typename StartLine>
typename StartLine::Outcome HeadScanner::Scan(const Chunks& chunks, size_t offset, size_t size,
                                              StartLine& start_line) {
  using Outcome = typename StartLine::Outcome;
  Outcome r;
  if (offset > size) {
    r = start_line.Fail(HeadFault::kOffsetPastEnd);
    state_ = State();
    return r;
  }
  const size_t available = size - offset;
  // Input that cannot continue what was scanned before: start over (see Scan's contract).
  if (state_.scanned > available) state_ = State();
  if (state_.scanned == available) return r;

  size_t chunk_start = 0;  // relative to the start of `chunks`
  for (std::span<const uint8_t> chunk : chunks) {
    const size_t chunk_end = chunk_start + chunk.size();
    if (chunk_end > offset + state_.scanned) {
      const size_t first = std::max(chunk_start, offset);
      const char* data = reinterpret_cast<const char*>(chunk.data()) + (first - chunk_start);
      r = ScanChunk(chunks, offset, data, first - offset, chunk_end - first, start_line);
      if (!r.incomplete()) {
        state_ = State();
        return r;
      }
    }
    chunk_start = chunk_end;
  }

  // Limits that fire on an incomplete head. The scan's window already caught a line or section
  // that ran past its limit inside a chunk; these catch one that reaches it exactly at the end of
  // the input.
  const size_t pending = state_.scanned - state_.line_start;
  if (!state_.in_headers && pending > limits_.max_start_line &&
      !(pending == limits_.max_start_line + 1 && state_.last == '\r')) {
    r = start_line.Fail(HeadFault::kStartLineTooLong);
    state_ = State();
  } else if (state_.in_headers &&
             state_.scanned - state_.headers_start >= limits_.max_header_bytes) {
    r = start_line.Fail(HeadFault::kHeaderSectionTooLarge);
    state_ = State();
  }
  return r;
}

template <typename Chunks, typename StartLine>
typename StartLine::Outcome HeadScanner::ScanChunk(const Chunks& chunks, size_t offset,
                                                   const char* data, size_t chunk_first,
                                                   size_t chunk_len, StartLine& start_line) {
  using Outcome = typename StartLine::Outcome;
  const size_t chunk_end = chunk_first + chunk_len;
  State& s = state_;
  size_t pos = s.scanned;
  while (pos < chunk_end) {
    // A legitimate line ends before this: a start line of max_start_line bytes has its LF at
    // line_start + max_start_line + 1, and the header section's final LF is inside
    // max_header_bytes. Bounding memchr by it also bounds the work on a hostile stream.
    const size_t limit_end = s.in_headers ? s.headers_start + limits_.max_header_bytes
                                          : s.line_start + limits_.max_start_line + 2;
    const size_t window_end = std::min(chunk_end, limit_end);
    const void* lf = pos < window_end
                         ? std::memchr(data + (pos - chunk_first), '\n', window_end - pos)
                         : nullptr;
    if (lf == nullptr) {
      if (window_end < chunk_end) {
        return start_line.Fail(s.in_headers ? HeadFault::kHeaderSectionTooLarge
                                            : HeadFault::kStartLineTooLong);
      }
      pos = chunk_end;
      break;
    }
    const size_t lf_pos = chunk_first + static_cast<size_t>(static_cast<const char*>(lf) - data);
    // Strict line endings: every line ends in CRLF. A bare LF is accepted by some parsers and not
    // by others, which is what request smuggling and response splitting feed on, so it is
    // rejected, not tolerated (RFC 9112 §2.2 allows either).
    const char before = lf_pos > chunk_first ? data[lf_pos - 1 - chunk_first] : s.last;
    // Errors are reported in stream order: a start line of max_start_line + 1 bytes before a bare
    // LF was already too long one byte before the LF arrived, as the incomplete check in Scan says
    // when the input stops there.
    if (!s.in_headers && lf_pos - s.line_start == limits_.max_start_line + 1 && before != '\r') {
      return start_line.Fail(HeadFault::kStartLineTooLong);
    }
    if (lf_pos == s.line_start || before != '\r') return start_line.Fail(HeadFault::kBareLf);
    const size_t line_len = lf_pos - 1 - s.line_start;  // without CRLF
    pos = lf_pos + 1;
    if (!s.in_headers) {
      if (line_len == 0) {
        if (++s.empty_lines > limits_.max_leading_empty_lines) {
          return start_line.Fail(HeadFault::kTooManyEmptyLines);
        }
        s.line_start = s.head_start = pos;
        continue;
      }
      const char* line;
      if (s.line_start >= chunk_first) {
        line = data + (s.line_start - chunk_first);
      } else {
        // The start line began in an earlier chunk: copy it (at most max_start_line).
        char* copy = Scratch(line_len);
        chunks.CopyTo(offset + s.line_start, {reinterpret_cast<uint8_t*>(copy), line_len});
        line = copy;
      }
      Outcome r = start_line.CheckStartLine({line, line_len});
      if (!r.incomplete()) return r;
      s.in_headers = true;
      s.headers_start = s.line_start = pos;
      continue;
    }
    if (line_len == 0) {
      // The empty line: the head is [head_start, pos).
      ScannedHead head;
      head.size = pos - s.head_start;
      head.start_line_size = s.headers_start - 2 - s.head_start;
      head.end = pos;
      head.skipped = s.skipped;
      if (s.head_start >= chunk_first) {
        head.bytes = data + (s.head_start - chunk_first);
      } else {
        // Spans chunks: linearize only the head (bounded by the limits) and parse the copy.
        head.linearized = true;
        char* copy = Scratch(head.size);
        chunks.CopyTo(offset + s.head_start, {reinterpret_cast<uint8_t*>(copy), head.size});
        head.bytes = copy;
      }
      Outcome r = start_line.Head(head);
      if (!r.incomplete()) return r;
      // Skipped: the next head starts right after.
      ++s.skipped;
      s.head_start = s.line_start = pos;
      s.headers_start = 0;
      s.empty_lines = 0;
      s.field_lines = 0;
      s.in_headers = false;
      continue;
    }
    if (++s.field_lines > limits_.max_header_count) {
      return start_line.Fail(HeadFault::kTooManyFields);
    }
    s.line_start = pos;
  }
  s.scanned = pos;
  s.last = data[pos - 1 - chunk_first];
  return Outcome();
}

}  // namespace sluice::http1

#endif  // SLUICE_HTTP1_HEAD_SCANNER_H_

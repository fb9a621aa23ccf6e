// An HTTP/1.1 response-head parser (RFC 9112) over pipe segments, zero-copy in the common case:
// the client side of http1/request_parser.h, built for the load generator.
//
// Parse() looks for the end of a response head across the segments of a BufferSequence,
// enforcing the size limits as it goes. Interim (1xx) responses other than 101 are validated,
// counted and skipped: the head returned is always a final response (or 101). When the final head
// lies in one contiguous chunk (the common case) it is parsed in place and every string_view of
// the ResponseHead points into the input; otherwise only the head is copied into the parser's
// scratch buffer (bounded by the limits). Bodies are not touched: `consumed` ends at the head, and
// the caller counts down `content_length` bytes, runs a ChunkedDecoder, or reads until the
// connection closes, as `framing` says. The scan, the field lines and the framing fields are
// http1/head_scanner.h, shared with the request parser; this file adds the status line, the
// interim heads and what a response's framing means.
//
//   sluice::http1::ResponseParser parser;         // one per connection
//   sluice::http1::ResponseHead head;             // reused: its header vector keeps capacity
//   size_t offset = 0;                            // pipelining: parse everything buffered
//   for (;;) {
//     sluice::http1::ResponseParseOutcome r =
//         parser.Parse(read.buffer, offset, /*head_request=*/false, &head);
//     if (r.incomplete()) break;                  // AdvanceTo(offset, buffer.size()), Read again
//     if (r.error()) { /* r.ToStatus(): a bad response; close the connection */ break; }
//     offset += r.consumed;                       // then the body, as head.framing says
//   }
//
// Strictness (every error is final for the connection: nothing after it can be framed):
//   INVALID_ARGUMENT  malformed status line (not "HTTP/1.x NNN[ reason]", a status code outside
//                     100..599, control characters in the reason), an HTTP version other than
//                     1.0 and 1.1, malformed field lines (same rules as requests: obs-fold,
//                     whitespace before the colon, bad bytes), bare LF or bare CR, an empty line
//                     where a status line belongs, a non-numeric or repeated Content-Length,
//                     Transfer-Encoding together with Content-Length, Transfer-Encoding in an
//                     HTTP/1.0 response, chunked applied twice, an empty Transfer-Encoding
//   RESOURCE_EXHAUSTED  a status line longer than max_status_line, a header section larger than
//                     max_header_bytes or with more than max_header_count lines (also while still
//                     incomplete), more than max_interim_responses 1xx heads before a final one
// A status line without the space and reason after the code ("HTTP/1.1 200") is accepted, as
// most clients do; the reason phrase is never interpreted.
//
// Framing (RFC 9112 §6.3), in order: a response to HEAD, 1xx, 204 and 304 have no body (kNone);
// Transfer-Encoding whose final coding is chunked → kChunked; Transfer-Encoding without a final
// chunked → kUntilClose; Content-Length → kContentLength; neither → kUntilClose. kUntilClose
// responses are never keep-alive.
//
// The outcome depends only on the bytes, never on how they were split into segments or reads
// (the fuzz target checks this).
//
// Thread-safety: thread-compatible. A parser belongs to one connection (its scratch buffer and
// resume state are per connection); a ResponseHead belongs to whoever passed it in.
#ifndef SLUICE_HTTP1_RESPONSE_PARSER_H_
#define SLUICE_HTTP1_RESPONSE_PARSER_H_

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/pipe.h"
#include "core/status.h"
#include "http1/field.h"
#include "http1/head_scanner.h"

namespace sluice::http1 {

// How the response body is delimited (RFC 9112 §6.3).
enum class ResponseFraming : uint8_t {
  kNone,           // no body (HEAD, 1xx, 204, 304)
  kContentLength,  // exactly content_length bytes
  kChunked,        // the chunked transfer coding: run a ChunkedDecoder
  kUntilClose,     // everything until the server closes the connection
};

// A parsed final response head. Every string_view points into the parser's input or its scratch
// buffer and stays valid until the next Parse() call on the same parser or until the caller
// consumes (AdvanceTo) the input, whichever comes first.
struct ResponseHead {
  // 0 for HTTP/1.0, 1 for HTTP/1.1.
  uint8_t version_minor = 1;
  // 100..599; a final status (>= 200) or 101.
  uint16_t status_code = 0;
  // The reason phrase as sent (possibly empty).
  std::string_view reason;
  // Every field line in order, names as sent, values with surrounding whitespace removed.
  // Cleared, not shrunk, by each Parse().
  std::vector<Header> headers;
  ResponseFraming framing = ResponseFraming::kNone;
  // With kContentLength; 0 otherwise.
  uint64_t content_length = 0;
  // Whether the connection may carry another response after this one: HTTP/1.1 unless
  // "Connection: close"; HTTP/1.0 only with "Connection: keep-alive". Never for kUntilClose or
  // 101.
  bool keep_alive = false;

  // The value of the first field named `name` (ASCII case-insensitive; `name` lowercase as for
  // EqualsLowercase), or an empty view if there is none.
  std::string_view Find(std::string_view name) const;

  // Resets every member; `headers` keeps its capacity.
  void Clear();
};

// Parser limits. Each violation has a counter in ResponseParserCounters.
struct ResponseParseLimits {
  // Longest status line, without its CRLF.
  size_t max_status_line = 8 * 1024;
  // Largest header section of one head: the field lines with their CRLFs plus the final empty
  // line.
  size_t max_header_bytes = 64 * 1024;
  // Most field lines in one head.
  size_t max_header_count = 100;
  // Most interim (1xx) heads before a final one: bounds a server that sends 100 Continue forever.
  size_t max_interim_responses = 16;
};

enum class ResponseParseStatus : uint8_t { kIncomplete, kComplete, kError };

struct [[nodiscard]] ResponseParseOutcome {
  ResponseParseStatus status = ResponseParseStatus::kIncomplete;
  // kComplete: bytes from the offset given to Parse up to the end of the final head, interim
  // heads included; the body (if any) starts right after. 0 otherwise.
  size_t consumed = 0;
  // kComplete: interim (1xx) heads skipped before the final one.
  uint32_t interim_responses = 0;
  // kError: INVALID_ARGUMENT (malformed) or RESOURCE_EXHAUSTED (a limit).
  StatusCode error_code = StatusCode::kOk;
  // kError: a short static description for logs and tests.
  std::string_view reason = {};

  bool incomplete() const { return status == ResponseParseStatus::kIncomplete; }
  bool complete() const { return status == ResponseParseStatus::kComplete; }
  bool error() const { return status == ResponseParseStatus::kError; }
  // OK unless error(); then error_code with the reason.
  Status ToStatus() const { return error() ? Status(error_code, reason) : OkStatus(); }
};

// What a parser has done since it was made. Plain counters owned by the parser's thread.
struct ResponseParserCounters {
  uint64_t responses = 0;                   // final heads parsed completely
  uint64_t interim_responses = 0;           // 1xx heads skipped
  uint64_t linearized = 0;                  // heads that spanned segments and were copied
  uint64_t errors = 0;                      // every kError, including the limit ones below
  uint64_t status_line_too_long = 0;        // max_status_line
  uint64_t header_bytes_too_large = 0;      // max_header_bytes
  uint64_t header_count_too_large = 0;      // max_header_count
  uint64_t interim_responses_too_many = 0;  // max_interim_responses
};

class ResponseParser {
 public:
  explicit ResponseParser(ResponseParseLimits limits = {});
  ResponseParser(const ResponseParser&) = delete;
  ResponseParser& operator=(const ResponseParser&) = delete;

  // Parses the response that starts `offset` bytes into `input` into *head. `head_request`: the
  // request it answers was a HEAD (so the response has no body whatever its fields say).
  //
  // Returns kIncomplete (consumed 0) when the final head has not ended yet and no limit is
  // broken: call again when more bytes have arrived. kComplete with the size of the interim
  // heads plus the final head, *head filled. kError with a code and reason; *head is
  // unspecified. An `offset` past the end of `input` (a caller bug) is INVALID_ARGUMENT.
  //
  // Resumption: after kIncomplete the parser remembers how far it looked (interim heads already
  // skipped included), so feeding a head one byte at a time costs O(head size) in total. The
  // next call must pass input that continues the same bytes from its `offset`. To parse
  // unrelated input after kIncomplete (a new connection), call Reset() first. kComplete and
  // kError forget the resume state by themselves.
  ResponseParseOutcome Parse(const BufferSequence& input, size_t offset, bool head_request,
                             ResponseHead* head);
  // The same over contiguous bytes: views point into `input`.
  ResponseParseOutcome Parse(std::string_view input, bool head_request, ResponseHead* head);

  // Forgets the resume state of an incomplete head.
  void Reset() { scanner_.Reset(); }

  const ResponseParseLimits& limits() const { return limits_; }
  const ResponseParserCounters& counters() const { return counters_; }

 private:
  // The start line the head scanner is given: the status line (response_parser.cc).
  struct StatusLine;

  // The status line of the head being scanned, validated by CheckStatusLine.
  struct LineParts {
    uint16_t status_code = 0;
    uint8_t version_minor = 1;
  };

  // Validates a complete status line (without CRLF) and records it in line_. Returns
  // kIncomplete (meaning "fine, go on") or the error.
  ResponseParseOutcome CheckStatusLine(std::string_view line);
  // Parses the complete head `scanned`, whose status line is line_, into *head. Returns kComplete
  // for a final head, kIncomplete for an interim one (skipped: the scan goes on) or the error.
  ResponseParseOutcome ParseHead(const ScannedHead& scanned, bool head_request, ResponseHead* head);
  // The answer to what the scanner refused.
  ResponseParseOutcome Fail(HeadFault fault);
  ResponseParseOutcome Fail(StatusCode code, std::string_view reason);
  ResponseParseOutcome LimitExceeded(uint64_t* counter, std::string_view reason);

  const ResponseParseLimits limits_;
  HeadScanner scanner_;
  LineParts line_;
  ResponseParserCounters counters_;
};

}  // namespace sluice::http1

#endif  // SLUICE_HTTP1_RESPONSE_PARSER_H_

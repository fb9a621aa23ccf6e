// An HTTP/1.1 request-head parser (RFC 9112) over pipe segments, zero-copy in the common case.
//
// Parse() looks for the end of the head (the empty line) across the segments of a
// BufferSequence, enforcing the size limits as it goes, so a head that grows without end is cut
// at the limit before it completes. When the whole head lies in one contiguous chunk (the common
// case) it is parsed in place and every string_view of the RequestHead points into the input:
// in one pass, the request line split by its syntax and each field line finding its own end.
// Otherwise (the head spans chunks, is
// incomplete, or is refused) the head scanner parses it, and only the head is copied into the
// parser's scratch buffer (bounded by the limits) when it spans chunks. Both ways accept and
// refuse the same heads with the same answers. Bodies are not touched: `consumed` is the size of
// the head, and the caller reads `content_length` bytes or runs a ChunkedDecoder from there. The
// scan, the field lines and the framing fields are http1/head_scanner.h, which the response parser
// shares; this file adds the request line and the fields only a request has (Host, Expect).
//
//   sluice::http1::RequestParser parser;          // one per connection
//   sluice::http1::RequestHead head;              // reused: its header vector keeps capacity
//   size_t offset = 0;                            // pipelining: parse everything buffered
//   for (;;) {
//     sluice::http1::ParseOutcome r = parser.Parse(read.buffer, offset, &head);
//     if (r.incomplete()) break;                  // AdvanceTo(offset, buffer.size()), Read again
//     if (r.error()) { /* answer r.status_code, close */ break; }
//     offset += r.consumed;                       // then the body, then the next request
//     ... handle head.method, head.path, head.Find("accept") ...
//   }
//
// Strictness (what is rejected, and with which status code):
//   400  malformed request line or field line, bare LF or bare CR, obs-fold, whitespace before a
//        colon, NUL/controls in values, invalid Host, HTTP/1.1 without Host, several Host lines,
//        Transfer-Encoding with Content-Length, Transfer-Encoding on HTTP/1.0, chunked not the
//        final (or applied twice), any repeated or non-numeric Content-Length (identical repeats
//        too), too many leading empty lines
//   414  request line longer than max_request_line (also while still incomplete)
//   417  an Expect other than 100-continue on HTTP/1.1 (HTTP/1.0 ignores Expect: RFC 9110 §10.1.1)
//   431  header section larger than max_header_bytes or more than max_header_count lines (also
//        while still incomplete: a slowloris of endless headers is cut at the limit)
//   501  a transfer coding other than chunked before the final chunked ("gzip, chunked")
//   505  an HTTP version other than 1.0 and 1.1
// Order: limit violations and bare LF are reported as soon as the bytes that break them arrive;
// a malformed request line as soon as it is complete; everything else once the head is complete.
// The outcome therefore depends only on the bytes, never on how they were split into segments
// or reads (the fuzz target checks this).
//
// Thread-safety: thread-compatible. A parser belongs to one connection (its scratch buffer and
// resume state are per connection); a RequestHead belongs to whoever passed it in.
#ifndef SLUICE_HTTP1_REQUEST_PARSER_H_
#define SLUICE_HTTP1_REQUEST_PARSER_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/pipe.h"
#include "http1/field.h"
#include "http1/head_scanner.h"

namespace sluice::http1 {

enum class Method : uint8_t {
  kGet,
  kHead,
  kPost,
  kPut,
  kDelete,
  kOptions,
  kPatch,
  kConnect,
  kTrace,
  kOther,  // a valid token that is none of the above (methods are case-sensitive: "get" is kOther)
};

// How the request body is delimited (RFC 9112 §6.3). Requests with neither Content-Length nor
// Transfer-Encoding have no body.
enum class BodyFraming : uint8_t { kNone, kContentLength, kChunked };

// A parsed request head. Every string_view points into the parser's input or its scratch buffer
// and stays valid until the next Parse() call on the same parser or until the caller consumes
// (AdvanceTo) the input, whichever comes first.
struct RequestHead {
  // The whole head, from the request line to the empty line that ends it (leading empty lines
  // excluded). Every view below points into it, except a path of "/" that an absolute-form
  // target without a path stands for (a literal). A connection that keeps the request copies
  // this once instead of each part.
  std::string_view bytes;
  Method method = Method::kOther;
  std::string_view method_text;
  // The request-target as sent.
  std::string_view target;
  // origin-form and absolute-form: the path ("/" when an absolute-form target has none);
  // asterisk-form: "*"; authority-form (CONNECT): empty. Not percent-decoded.
  std::string_view path;
  // The query after '?', without it; empty when there is none.
  std::string_view query;
  // 0 for HTTP/1.0, 1 for HTTP/1.1.
  uint8_t version_minor = 1;
  // Every field line in order, names as sent (compare with EqualsLowercase or Find), values
  // with surrounding whitespace removed. Cleared, not shrunk, by each Parse().
  std::vector<Header> headers;
  BodyFraming framing = BodyFraming::kNone;
  // With kContentLength; 0 otherwise.
  uint64_t content_length = 0;
  // Whether the connection stays open after this request: HTTP/1.1 unless "Connection: close";
  // HTTP/1.0 only with "Connection: keep-alive" (and no "close").
  bool keep_alive = false;
  // HTTP/1.1 "Expect: 100-continue": answer 100 Continue before reading the body (or a final
  // status instead).
  bool expect_continue = false;
  // The Host field value, or the authority of an absolute-form target (which takes precedence,
  // RFC 9112 §3.2.2); the target itself for CONNECT. Empty for HTTP/1.0 without Host.
  std::string_view host;

  // The value of the first field named `name` (ASCII case-insensitive; `name` lowercase as for
  // EqualsLowercase), or an empty view if there is none.
  std::string_view Find(std::string_view name) const;

  // Resets every member; `headers` keeps its capacity.
  void Clear();
};

// Parser limits. Each violation has a counter in RequestParserCounters.
struct ParseLimits {
  // Longest request line, without its CRLF. Longer: 414.
  size_t max_request_line = 8 * 1024;
  // Largest header section: the field lines with their CRLFs plus the final empty line (so a
  // head is at most max_request_line + 2 + max_header_bytes bytes). Larger: 431.
  size_t max_header_bytes = 32 * 1024;
  // Most field lines in one head. More: 431.
  size_t max_header_count = 100;
  // Empty lines (CRLF) skipped before a request line (RFC 9112 §2.2; some clients send one after
  // a body). More: 400.
  size_t max_leading_empty_lines = 8;
};

enum class ParseStatus : uint8_t { kIncomplete, kComplete, kError };

struct [[nodiscard]] ParseOutcome {
  ParseStatus status = ParseStatus::kIncomplete;
  // kComplete: bytes of the head from the offset given to Parse, leading empty lines included;
  // the body (if any) starts right after. 0 otherwise.
  size_t consumed = 0;
  // kError: the status code to answer (400, 414, 417, 431, 501 or 505), then close.
  uint16_t status_code = 0;
  // kError: a short static description for logs and tests.
  std::string_view reason = {};

  bool incomplete() const { return status == ParseStatus::kIncomplete; }
  bool complete() const { return status == ParseStatus::kComplete; }
  bool error() const { return status == ParseStatus::kError; }

  static ParseOutcome Incomplete() { return {}; }
  static ParseOutcome Complete(size_t consumed) {
    ParseOutcome r;
    r.status = ParseStatus::kComplete;
    r.consumed = consumed;
    return r;
  }
  static ParseOutcome Error(uint16_t code, std::string_view reason) {
    ParseOutcome r;
    r.status = ParseStatus::kError;
    r.status_code = code;
    r.reason = reason;
    return r;
  }
};

// What a parser has done since it was made. Plain counters owned by the parser's thread, read by
// its tests; the server counts its rejections itself, by answer (ServerStats).
struct RequestParserCounters {
  uint64_t requests = 0;                // heads parsed completely
  uint64_t linearized = 0;              // of which spanned segments and were copied to scratch
  uint64_t errors = 0;                  // every kError, including the limit ones below
  uint64_t request_line_too_long = 0;   // 414 (max_request_line)
  uint64_t header_bytes_too_large = 0;  // 431 (max_header_bytes)
  uint64_t header_count_too_large = 0;  // 431 (max_header_count)
  uint64_t leading_empty_lines_too_many = 0;  // 400 (max_leading_empty_lines)
};

class RequestParser {
 public:
  explicit RequestParser(ParseLimits limits = {});
  RequestParser(const RequestParser&) = delete;
  RequestParser& operator=(const RequestParser&) = delete;

  // Parses the request head that starts `offset` bytes into `input` into *head.
  //
  // Returns kIncomplete (consumed 0) when the head has not ended yet and no limit is broken:
  // call again when more bytes have arrived. kComplete with the head's size, *head filled. kError
  // with a status code and reason; *head is unspecified and the connection must be closed after
  // answering (nothing after the error can be framed reliably). kError 500 if `offset` is past
  // the end of `input` (a caller bug).
  //
  // Resumption: after kIncomplete the parser remembers how far it looked, so feeding a head one
  // byte at a time costs O(head size) in total, not O(size^2). The next call must therefore pass
  // input that continues the same bytes from its `offset` (the usual AdvanceTo(offset, size) /
  // Read loop does: the offset may change as earlier requests are consumed). To parse unrelated
  // input after kIncomplete (a new connection), call Reset() first. A kComplete or kError
  // result forgets the resume state by itself.
  ParseOutcome Parse(const BufferSequence& input, size_t offset, RequestHead* head) {
    // Nearly every head starts in the first chunk and ends there too: parsed in place (inline:
    // this is the connection's call per request).
    if (!scanner_.resuming() && offset < input.size()) {
      const std::span<const uint8_t> first = input.FirstSpan();
      if (offset < first.size()) {
        const size_t consumed = ParseInPlace(reinterpret_cast<const char*>(first.data()) + offset,
                                             first.size() - offset, head);
        if (consumed != 0) return ParseOutcome::Complete(consumed);
      }
    }
    return Scan(input, offset, head);
  }
  ParseOutcome Parse(const BufferSequence& input, RequestHead* head) {
    return Parse(input, 0, head);
  }
  // The same over contiguous bytes (a test, a TLS plaintext buffer): views point into `input`.
  ParseOutcome Parse(std::string_view input, RequestHead* head);

  // Forgets the resume state of an incomplete head.
  void Reset() { scanner_.Reset(); }

  const ParseLimits& limits() const { return limits_; }
  const RequestParserCounters& counters() const { return counters_; }

 private:
  // The start line the head scanner is given: the request line (request_parser.cc).
  struct RequestLine;

  // A part of the request line, as an offset from its first byte.
  struct LinePart {
    size_t offset = 0;
    size_t size = 0;
  };
  // The request line of the head being scanned, validated and split by CheckRequestLine, as
  // offsets from its first byte (the line may be a copy in scratch then, and in place once the
  // head is complete).
  struct LineParts {
    size_t method_len = 0;
    size_t target_len = 0;  // the target starts at method_len + 1
    // The target's parts (see RequestHead).
    LinePart path;
    LinePart query;
    LinePart authority;
    // An absolute-form target without a path: the path is "/", which is not in the line.
    bool root_path = false;
    Method method = Method::kOther;
    uint8_t version_minor = 1;
  };

  // Parse by the head scanner: a head that spans chunks, or that ParseInPlace declined.
  ParseOutcome Scan(const BufferSequence& input, size_t offset, RequestHead* head);
  // Validates a complete request line (without CRLF) and records it in line_. Returns
  // kIncomplete (meaning "fine, go on") or the error.
  ParseOutcome CheckRequestLine(std::string_view line);
  // The part of the request line checks after the line was split: the method (its first
  // `method_len` bytes), the target (valid bytes, its first '?' at `question_mark` or none at
  // target.size()) and the version. Records the line in line_ and returns kIncomplete, or the
  // error, not counted.
  ParseOutcome RecordRequestLine(std::string_view line, size_t method_len, std::string_view target,
                                 size_t question_mark, uint8_t version_minor);
  // Parses the complete head `scanned`, whose request line is line_, into *head.
  ParseOutcome ParseHead(const ScannedHead& scanned, RequestHead* head);
  // Fills *head from line_ (the request line, as offsets from `bytes`) and the field lines that
  // start at `fields_start`, up to and including the empty line that ends them, all within
  // bytes[0, size). Returns kComplete with the head's size (from `bytes`), or the error, not
  // counted: a field section without its empty line before `size` is "malformed header section".
  ParseOutcome ParseFields(const char* bytes, size_t size, size_t fields_start, RequestHead* head);
  // The fast path of Parse, for a head that starts at `data` with no scan to resume: the request
  // line is split by its own syntax and the field lines find their ends as they are parsed, so
  // the head's bytes are examined once, with no separate search for line ends. Returns the
  // head's size, *head filled, when the whole head is within the `size` bytes at `data` and
  // valid. Anything else (an incomplete head, an error, a limit reached, leading empty lines)
  // returns 0 without counting anything, and the scanner parses the head instead: what is
  // accepted, and every error and its order, stay the scanner's.
  size_t ParseInPlace(const char* data, size_t size, RequestHead* head);
  // The answer to what the scanner refused.
  ParseOutcome Fail(HeadFault fault);
  ParseOutcome Fail(uint16_t code, std::string_view reason);

  const ParseLimits limits_;
  HeadScanner scanner_;
  LineParts line_;
  // The last Host value found valid on this connection (at most kMaxRememberedHost bytes). A
  // client sends the same Host on every request: comparing it with this is cheaper than
  // validating it again byte by byte, and validity depends on the bytes alone. Starts empty,
  // which is a valid Host.
  static constexpr size_t kMaxRememberedHost = 255;
  std::string valid_host_;
  RequestParserCounters counters_;
};

}  // namespace sluice::http1

#endif  // SLUICE_HTTP1_REQUEST_PARSER_H_

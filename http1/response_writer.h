// Serializes HTTP/1.1 responses straight into a PipeWriter: status line, fields, the Date from a
// DateCache, the framing field (Content-Length or Transfer-Encoding: chunked) and Connection,
// then (for chunked bodies) chunks and the last chunk. Nothing goes through an intermediate
// string: a head is measured, then written into one span of the pipe.
//
// Responses to pipelined requests are appended to the same writer and flushed once: that single
// Flush (and the single writev behind it) is the coalescing the connection relies on.
//
//   const sluice::http1::Header fields[] = {{"Content-Type", "text/plain"}};
//   sluice::Status s = sluice::http1::WriteResponseHead(
//       {.status_code = 200, .headers = fields, .content_length = 13}, &pipe.writer());
//   if (s.ok()) s = pipe.writer().Write("Hello, World!");
//   ... more responses ...
//   pipe.writer().Flush(...);
//
// Every function returns INVALID_ARGUMENT (writing nothing) for input that would make an invalid
// or ambiguous message: a status code outside 100..999, a reason or field with CR, LF, NUL or
// other controls, a field name that is not a token, a Content-Length or Transfer-Encoding field
// among `headers` (framing belongs to the writer), a body framing on a 1xx or 204 response, body
// bytes in a head without Content-Length or more of them than it says. They
// return FAILED_PRECONDITION if the writer was completed.
//
// Thread-safety: stateless functions (the default Date comes from the calling thread's
// DateCache); a PipeWriter is used by one thread at a time, as always.
#ifndef SLUICE_HTTP1_RESPONSE_WRITER_H_
#define SLUICE_HTTP1_RESPONSE_WRITER_H_

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/pipe.h"
#include "core/status.h"
#include "http/date_cache.h"
#include "http1/field.h"

namespace sluice::http1 {

// How the body of a response is delimited.
enum class ResponseFraming : uint8_t {
  kContentLength,  // "Content-Length: <content_length>" (also for a HEAD response: the length
                   // the GET would have, and no body written)
  kChunked,        // "Transfer-Encoding: chunked"; then WriteChunk... WriteLastChunk
  kNone,           // neither: 1xx, 204, 304
};

// What the Connection field says.
enum class ConnectionOption : uint8_t {
  kDefault,    // no Connection field: HTTP/1.1 keep-alive
  kClose,      // "Connection: close": the connection closes after this response
  kKeepAlive,  // "Connection: keep-alive": for HTTP/1.0 clients that asked for it
};

struct ResponseHead {
  uint16_t status_code = 200;
  // Empty: the standard phrase for status_code (ReasonPhrase).
  std::string_view reason = {};
  // Sent in order, after Date and before the framing and Connection fields.
  std::span<const Header> headers = {};
  ResponseFraming framing = ResponseFraming::kContentLength;
  // With kContentLength.
  uint64_t content_length = 0;
  ConnectionOption connection = ConnectionOption::kDefault;
  // The Date field's value. Empty: DateCache::ForThisThread().Now(), or Now(steady_now) when
  // that is set. Every response carries a Date (RFC 9110 §6.6.1: an origin server with a clock
  // sends one).
  std::string_view date = {};
  // A steady_clock reading the caller already has (its event loop's pass start, on the loop
  // thread): the default Date is then taken from it, without a clock read per response (see
  // http/date_cache.h). The epoch (unset): the cache reads the clock.
  std::chrono::steady_clock::time_point steady_now = {};
  // With kContentLength: the start of the body (at most content_length bytes), written right
  // after the head in the same span, so that a small response costs one write to the pipe.
  // The caller writes the rest of the body, if any.
  std::span<const uint8_t> body = {};
};

// The RFC 9110 reason phrase for `status_code` ("OK", "Not Found", ...), or "" for a code it
// does not name (the status line then ends in "NNN \r\n", which is valid).
std::string_view ReasonPhrase(uint16_t status_code);

// The fields of the last response head written with it, remembered once found valid, with their
// serialization ("name: value\r\n" each). A handler usually sets the same fields on every
// response: comparing them with these costs less than checking them again byte by byte, and
// validity depends on the bytes alone, so a match skips the check and is written with one copy.
// Fields that differ in any byte are checked (and refused) as without a memo.
//
// With the fields, it keeps the last whole head (status line to empty line) written with them,
// and the status, Date, framing, length and Connection it was made of: a response that repeats
// all of them (a handler answering the same way within a second) is written as a copy of it. A
// head is kept once a response repeats its predecessor's length, so a handler whose bodies vary
// in length does not pay for keeping one on every response.
//
//   sluice::http1::ResponseFieldsMemo memo;  // one per connection
//   Status s = sluice::http1::WriteResponseHead(head, &memo, &out);
//
// Thread-safety: thread-compatible; it belongs to the connection, used by whoever writes its
// responses at the time.
class ResponseFieldsMemo {
 public:
  // Fields whose serialization is larger than this are checked on every response instead.
  static constexpr size_t kMaxBytes = 1024;

  // Whether `fields` are the ones remembered: as many, each name and value equal byte for byte.
  bool Matches(std::span<const Header> fields) const;
  // The same for fields held as (name, value) strings, as a handler's response keeps them.
  bool Matches(std::span<const std::pair<std::string, std::string>> fields) const;
  // Remembers `fields`, which the caller found valid, and serializes them; returns false (and
  // remembers nothing, so that only an empty list matches) if they exceed kMaxBytes. `size` is
  // their serialized size.
  bool Remember(std::span<const Header> fields, size_t size);
  // The remembered fields, serialized.
  std::string_view lines() const { return lines_; }

 private:
  friend struct ResponseWriterAccess;  // response_writer.cc: the last head

  template <typename Field>
  bool MatchesFields(std::span<const Field> fields) const;

  // The last head written whole with these fields (empty: none), and what it was made of.
  struct LastHead {
    std::string bytes;
    uint16_t status_code = 0;
    ResponseFraming framing = ResponseFraming::kNone;
    ConnectionOption connection = ConnectionOption::kDefault;
    uint64_t content_length = 0;
    std::array<char, http::kImfFixdateLength> date{};
    // The Content-Length of the last response written with these fields, kept or not.
    uint64_t last_length = UINT64_MAX;
  };
  LastHead last_head_;

  // The name and value size of each field, in order; the bytes are in lines_.
  std::vector<std::pair<uint32_t, uint32_t>> sizes_;
  std::string lines_;
};

// Appends the head: "HTTP/1.1 NNN Reason", Date, `headers`, the framing field, the Connection
// field and the empty line, all in one span of `out`. Does not flush.
[[nodiscard]] Status WriteResponseHead(const ResponseHead& head, PipeWriter* out);
// The same, checking `head.headers` against *memo first (see ResponseFieldsMemo) and remembering
// them there when they were checked and found valid. The outcome is the same as without it.
[[nodiscard]] Status WriteResponseHead(const ResponseHead& head, ResponseFieldsMemo* memo,
                                       PipeWriter* out);

// The same, with the fields *memo remembers (found valid when remembered, written as it
// serialized them) in place of `head.headers`, which must be empty: for a caller that found its
// fields equal to the memo's (Matches) before making a span of Headers for them.
[[nodiscard]] Status WriteResponseHeadFromMemo(const ResponseHead& head, ResponseFieldsMemo* memo,
                                               PipeWriter* out);

// Appends "HTTP/1.1 100 Continue" (the interim answer to Expect: 100-continue).
[[nodiscard]] Status WriteContinue(PipeWriter* out);

// Appends one chunk: hex size, CRLF, `data`, CRLF. Empty data writes nothing (a zero-size chunk
// would end the body).
[[nodiscard]] Status WriteChunk(std::span<const uint8_t> data, PipeWriter* out);
[[nodiscard]] Status WriteChunk(std::string_view data, PipeWriter* out);

// Appends the last chunk ("0" CRLF), the trailer fields and the final CRLF.
[[nodiscard]] Status WriteLastChunk(std::span<const Header> trailers, PipeWriter* out);

}  // namespace sluice::http1

#endif  // SLUICE_HTTP1_RESPONSE_WRITER_H_
